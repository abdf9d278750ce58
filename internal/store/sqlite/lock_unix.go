//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// lockFile takes an exclusive flock(2) on the file at path without waiting,
// creating the file when missing, and writes this process's id into it. A
// flock belongs to the open file, not to the path: the kernel drops it when
// the file is closed or the process dies, so a file a killed process left
// behind does not hold anything. It returns errHeld when another open file
// holds the lock.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, err
	}
	if err := flock(f); err != nil {
		f.Close()
		return nil, err
	}
	// Truncated first, so a shorter pid leaves no digits of the last one.
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, fmt.Errorf("write pid: %w", err)
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("write pid: %w", err)
	}
	return f, nil
}

func flock(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) {
		for {
			ferr = syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB)
			if ferr != syscall.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if errors.Is(ferr, syscall.EWOULDBLOCK) {
		return errHeld
	}
	if ferr != nil {
		return fmt.Errorf("flock: %w", ferr)
	}
	return nil
}
