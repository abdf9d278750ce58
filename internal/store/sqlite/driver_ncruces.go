//go:build aion_sqlite_ncruces && !aion_sqlite_cgo

package sqlite

import (
	"database/sql"

	ncruces "github.com/ncruces/go-sqlite3/driver"
)

// DriverName names the SQLite library this binary was built with.
const DriverName = "github.com/ncruces/go-sqlite3"

// Built with -tags aion_sqlite_ncruces: SQLite compiled to Wasm and
// translated to Go, without cgo. It reads the DSN's _pragma and _txlock
// parameters as the default driver does, so it only needs the name the
// store opens.
func init() { sql.Register("sqlite", &ncruces.SQLite{}) }
