package attack

import (
	"sync"
	"time"

	"github.com/aion-run/aion/internal/proc"
)

// sampler reads a process's memory at a fixed interval and keeps the
// peak, the last reading and the high-water mark the kernel keeps.
type sampler struct {
	pid      int
	interval time.Duration
	// over, when set, is called once when a reading passes limitKB.
	limitKB int64
	over    func(kb int64)

	mu      sync.Mutex
	samples int
	peak    int64
	last    proc.Memory
	err     error
	tripped bool
}

// sample takes one reading.
func (s *sampler) sample() {
	m, err := proc.ReadMemory(s.pid)
	s.mu.Lock()
	if err != nil {
		if s.samples == 0 {
			s.err = err
		}
		s.mu.Unlock()
		return // the process has ended: keep the last good reading
	}
	s.samples++
	s.last = m
	s.peak = max(s.peak, m.RSS)
	trip := s.over != nil && s.limitKB > 0 && m.RSS > s.limitKB && !s.tripped
	if trip {
		s.tripped = true
	}
	s.mu.Unlock()
	if trip {
		s.over(m.RSS)
	}
}

// run samples until stop is closed.
func (s *sampler) run(stop <-chan struct{}) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	s.sample()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			s.sample()
		}
	}
}

// RSS is the memory of the server under attack, in MB (10^6 bytes).
type RSS struct {
	// BaselineMB is the resident set just before the attack began.
	BaselineMB float64 `json:"baseline_mb"`
	// PeakMB is the largest VmRSS sampled during the run.
	PeakMB float64 `json:"peak_mb"`
	// EndMB is the last VmRSS sampled, after the attack stopped.
	EndMB float64 `json:"end_mb"`
	// HWMMB is the kernel's VmHWM at the end: the peak resident set since
	// the server started, between samples included. The kernel updates it
	// lazily, so it may be a little below PeakMB.
	HWMMB float64 `json:"hwm_mb"`
	// Samples is how many readings were taken (one each IntervalMS).
	Samples    int   `json:"samples"`
	IntervalMS int64 `json:"interval_ms"`
}

func mb(kb int64) float64 { return float64(kb) * 1024 / 1e6 }
