package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	aionv1 "github.com/aion-run/aion/gen/aion/v1"
)

// Window is what one sampling window of a run with Options.Window saw:
// the latencies of the work that finished in it, and the server's
// footprint sampled at its end.
type Window struct {
	// End is the window's end in seconds from the start of the load.
	End float64 `json:"end_s"`
	// Completed counts the activities completed in the window.
	Completed int `json:"completed"`
	// ScheduleToStart (dispatch) and EndToEnd are over the tasks bench
	// workers received, and the activities that completed, in the window.
	ScheduleToStart Percentiles `json:"schedule_to_start_ms"`
	EndToEnd        Percentiles `json:"end_to_end_ms"`
	// DBBytes and WALBytes are the sizes of Options.DBPath and its
	// write-ahead log (-1 when not sampled).
	DBBytes  int64 `json:"db_bytes"`
	WALBytes int64 `json:"wal_bytes"`
	// RSSBytes is the server's resident memory as its
	// process_resident_memory_bytes metric reports it (-1 when not
	// sampled); Reaped is its aion_reaped_total summed over namespaces
	// and kinds, since it started.
	RSSBytes int64 `json:"rss_bytes"`
	Reaped   int64 `json:"reaped"`
}

// sampler records a Window every Options.Window while the load runs.
type sampler struct {
	o     Options
	r     *runner
	start time.Time
	// metricsURL and dbPath are where the server's footprint is read.
	metricsURL, dbPath string

	mu      sync.Mutex
	windows []Window
	// seenStart and seenEnd are how far into the runner's toStart and
	// endToEnd the windows so far have read.
	seenStart, seenEnd int
	stop               chan struct{}
	done               chan struct{}
}

func startSampler(o Options, r *runner, start time.Time, metricsURL, dbPath string) *sampler {
	s := &sampler{o: o, r: r, start: start, metricsURL: metricsURL, dbPath: dbPath,
		stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(o.Window)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case now := <-t.C:
				s.sample(now)
			}
		}
	}()
	return s
}

// finish stops the sampling and returns the windows recorded.
func (s *sampler) finish() []Window {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.windows
}

func (s *sampler) sample(now time.Time) {
	s.r.mu.Lock()
	toStart := append([]time.Duration(nil), s.r.toStart[s.seenStart:]...)
	ends := s.r.endToEnd[s.seenEnd:]
	lat := make([]time.Duration, len(ends))
	for i, e := range ends {
		lat[i] = e.latency
	}
	s.seenStart, s.seenEnd = len(s.r.toStart), len(s.r.endToEnd)
	s.r.mu.Unlock()
	w := Window{End: now.Sub(s.start).Seconds(), Completed: len(lat),
		ScheduleToStart: percentiles(toStart), EndToEnd: percentiles(lat), DBBytes: -1, WALBytes: -1, RSSBytes: -1}
	if s.dbPath != "" {
		w.DBBytes, w.WALBytes = fileSize(s.dbPath), fileSize(s.dbPath+"-wal")
	}
	if s.metricsURL != "" {
		w.RSSBytes, w.Reaped = scrape(s.metricsURL)
	}
	s.mu.Lock()
	s.windows = append(s.windows, w)
	s.mu.Unlock()
	if s.o.Progress != nil {
		fmt.Fprintf(s.o.Progress, "window %4.0fs: %6d done  dispatch p99 %8.3f ms  db %6.1f MiB  wal %6.1f MiB  rss %6.1f MiB  reaped %d\n",
			w.End, w.Completed, w.ScheduleToStart.P99, mib(w.DBBytes), mib(w.WALBytes), mib(w.RSSBytes), w.Reaped)
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// fileSize is the size of path: 0 when it does not exist, -1 when it
// cannot be read.
func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0
	}
	if err != nil {
		return -1
	}
	return st.Size()
}

// scrape reads the server's resident memory and reaped total from its
// Prometheus text; a value it cannot read is -1.
func scrape(url string) (rss, reaped int64) {
	rss, reaped = -1, -1
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, value, ok := strings.Cut(line, " ")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := strconv.ParseFloat(value[strings.LastIndexByte(value, ' ')+1:], 64)
		if err != nil {
			continue
		}
		switch {
		case name == "process_resident_memory_bytes":
			rss = int64(v)
		case strings.HasPrefix(name, "aion_reaped_total{"):
			reaped = max(reaped, 0) + int64(v)
		}
	}
	if reaped < 0 && rss >= 0 {
		reaped = 0 // the server reaped nothing yet
	}
	return
}

// setRetention creates the run's namespace and sets its retention.
func setRetention(ctx context.Context, cc *grpc.ClientConn, ns string, retention time.Duration) error {
	c := aionv1.NewNamespaceServiceClient(cc)
	if _, err := c.Create(ctx, &aionv1.CreateNamespaceRequest{Name: ns}); err != nil {
		return fmt.Errorf("create namespace %q: %w", ns, err)
	}
	if _, err := c.SetRetention(ctx, &aionv1.SetRetentionRequest{Name: ns, Retention: durationpb.New(retention)}); err != nil {
		return fmt.Errorf("set retention of namespace %q to %v: %w", ns, retention, err)
	}
	return nil
}
