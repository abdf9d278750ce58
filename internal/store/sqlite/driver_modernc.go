//go:build !aion_sqlite_cgo && !aion_sqlite_ncruces

package sqlite

// The default build: modernc.org/sqlite, SQLite translated to Go, registers
// the "sqlite" driver and reads the DSN's _pragma and _txlock parameters
// itself. No C compiler, one static binary for any GOOS/GOARCH.
import _ "modernc.org/sqlite"

// DriverName names the SQLite library this binary was built with.
const DriverName = "modernc.org/sqlite"
