//go:build aion_sqlite_cgo

package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"net/url"
	"strings"

	mattn "github.com/mattn/go-sqlite3"
)

// DriverName names the SQLite library this binary was built with.
const DriverName = "github.com/mattn/go-sqlite3"

// Built with -tags aion_sqlite_cgo (and CGO_ENABLED=1): SQLite's C source
// compiled by cgo. mattn's driver knows no _pragma parameter, so the
// "sqlite" driver here takes the _pragma parameters out of the DSN and runs
// them, in order, on every new connection, as the default driver does; the
// rest of the DSN (_txlock, mode) mattn's driver and SQLite read.
func init() { sql.Register("sqlite", cgoDriver{}) }

type cgoDriver struct{}

func (d cgoDriver) Open(dsn string) (driver.Conn, error) {
	c, err := d.OpenConnector(dsn)
	if err != nil {
		return nil, err
	}
	return c.Connect(context.Background())
}

func (cgoDriver) OpenConnector(dsn string) (driver.Connector, error) {
	name, query, _ := strings.Cut(dsn, "?")
	var pragmas, rest []string
	for _, p := range strings.Split(query, "&") {
		k, v, _ := strings.Cut(p, "=")
		switch {
		case p == "":
		case k == "_pragma":
			pv, err := url.QueryUnescape(v)
			if err != nil {
				return nil, fmt.Errorf("sqlite dsn: _pragma %q: %w", v, err)
			}
			pragmas = append(pragmas, "PRAGMA "+pv)
		default:
			rest = append(rest, p) // kept as written: the path is not re-encoded
		}
	}
	if len(rest) > 0 {
		name += "?" + strings.Join(rest, "&")
	}
	return cgoConnector{name: name, pragmas: pragmas}, nil
}

type cgoConnector struct {
	name    string
	pragmas []string
}

func (c cgoConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := (&mattn.SQLiteDriver{}).Open(c.name)
	if err != nil {
		return nil, err
	}
	sc := conn.(*mattn.SQLiteConn)
	for _, p := range c.pragmas {
		if _, err := sc.Exec(p, nil); err != nil {
			sc.Close()
			return nil, fmt.Errorf("sqlite dsn: %s: %w", p, err)
		}
	}
	return conn, nil
}

func (cgoConnector) Driver() driver.Driver { return cgoDriver{} }
