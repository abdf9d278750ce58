//go:build aion_sqlite_ncruces && !aion_sqlite_cgo

package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strings"

	ncruces "github.com/ncruces/go-sqlite3/driver"
)

// DriverName names the SQLite library this binary was built with.
const DriverName = "github.com/ncruces/go-sqlite3"

// Built with -tags aion_sqlite_ncruces: SQLite compiled to Wasm and
// translated to Go, without cgo. It reads the DSN's _pragma and _txlock
// parameters as the default driver does; only a DSN without _txlock means
// something else (BEGIN IMMEDIATE there, DEFERRED in the default driver),
// so the "sqlite" driver here makes it deferred.
func init() { sql.Register("sqlite", ncrucesDriver{}) }

type ncrucesDriver struct{}

func (d ncrucesDriver) Open(dsn string) (driver.Conn, error) {
	c, err := d.OpenConnector(dsn)
	if err != nil {
		return nil, err
	}
	return c.Connect(context.Background())
}

func (ncrucesDriver) OpenConnector(dsn string) (driver.Connector, error) {
	if !strings.Contains(dsn, "_txlock=") {
		if strings.Contains(dsn, "?") {
			dsn += "&_txlock=deferred"
		} else {
			dsn += "?_txlock=deferred"
		}
	}
	return (&ncruces.SQLite{}).OpenConnector(dsn)
}
