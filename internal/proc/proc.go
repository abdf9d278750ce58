// Package proc reads what Linux reports of a running process, for the
// tools that measure a server from outside (aion bench backlog, aion attack).
package proc

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// Memory is what /proc/<pid>/status says of a process's memory, in KiB.
type Memory struct {
	// RSS is the resident set now (VmRSS); HWM its peak so far (VmHWM).
	RSS, HWM int64
}

// ReadMemory reads VmRSS and VmHWM of process pid (Linux only).
func ReadMemory(pid int) (Memory, error) {
	path := fmt.Sprintf("/proc/%d/status", pid)
	f, err := os.Open(path)
	if err != nil {
		return Memory{}, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	var m Memory
	found := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Bytes()
		var dst *int64
		switch {
		case bytes.HasPrefix(line, []byte("VmRSS:")):
			dst = &m.RSS
		case bytes.HasPrefix(line, []byte("VmHWM:")):
			dst = &m.HWM
		default:
			continue
		}
		fields := bytes.Fields(line)
		if len(fields) < 2 {
			return Memory{}, fmt.Errorf("%s: malformed line %q", path, line)
		}
		v, err := strconv.ParseInt(string(fields[1]), 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("%s: line %q: %w", path, line, err)
		}
		*dst = v
		found++
	}
	if err := sc.Err(); err != nil {
		return Memory{}, fmt.Errorf("read %s: %w", path, err)
	}
	if found < 2 {
		return Memory{}, fmt.Errorf("%s: no VmRSS and VmHWM lines", path)
	}
	return m, nil
}
