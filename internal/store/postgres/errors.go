package postgres

import (
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/aion-run/aion/internal/store"
	"github.com/jackc/pgx/v5/pgconn"
)

// dbErr translates a database error into the store's terms, so that callers
// branch on store sentinels and import no driver: an unreachable database or
// a broken connection becomes store.ErrUnavailable (the text of the driver's
// error is kept). Other errors pass unchanged.
func dbErr(err error) error {
	if err == nil || errors.Is(err, store.ErrUnavailable) {
		return err
	}
	var (
		connect *pgconn.ConnectError
		netErr  net.Error
	)
	if errors.As(err, &connect) || errors.As(err, &netErr) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, pgconn.ErrConnClosed) || pgconn.SafeToRetry(err) {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}
