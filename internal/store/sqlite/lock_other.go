//go:build !unix

package sqlite

import "os"

// lockFile takes no lock where there is no flock(2) (Windows among them):
// there Open does not stop a second process from opening the same database,
// and running one server per data directory is left to the operator. The
// server is built and run on Unix systems, where the lock is taken.
func lockFile(string) (*os.File, error) { return nil, nil }
