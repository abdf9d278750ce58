// Package schedule is the pure logic of schedules: it reads a schedule's
// spec into a Trigger (cron expressions through robfig/cron, intervals with
// an offset), tells its ticks in order and the instant each fires at
// (nominal time plus a jitter every server computes alike), and decides,
// given a schedule's state and the time, what its due ticks do under its
// overlap and catch-up policies. It does no I/O and reads no clock: the
// scheduler (internal/scheduler) gives it the time and carries out what it
// decides.
//
// Daylight saving time, for cron specs read in a zone that has it: a
// wall-clock time that does not exist on the day the clocks go forward does
// not fire that day (a daily 02:30 in America/New_York does not fire on
// 2026-03-08). A wall-clock time that occurs twice on the day they go back
// fires once, at its first occurrence, when the spec's hour field names
// particular hours; a spec whose hour field is `*` fires on both
// occurrences, since it describes a rhythm rather than a time of day (an
// hourly spec fires 25 times on that day and 23 on the spring one).
// Interval specs are counted in absolute time and know no zone.
package schedule

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
	// The zone database is compiled in, so a zone named in a schedule means
	// the same on every server, whatever the host's /usr/share/zoneinfo.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"

	"github.com/aion-run/aion/internal/store"
)

// ErrInvalid is wrapped by every refusal of a spec or a policy; the message
// names the field and the value.
var ErrInvalid = errors.New("invalid schedule")

// MinEvery is the shortest interval an interval spec may have: ticks more
// often than every second would be a load generator, not a schedule.
const MinEvery = time.Second

// parser reads 5-field expressions (minute first) and 6-field ones
// (seconds first), CRON_TZ= and TZ= prefixes, and descriptors such as
// @daily.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// allHours is the hour field of a spec whose hour is `*`.
const allHours = 1<<24 - 1

// Trigger is a checked spec that tells its ticks.
type Trigger struct {
	spec  store.ScheduleSpec
	cron  *cron.SpecSchedule // nil for an interval spec
	loc   *time.Location
	fixed bool // the cron hour field names particular hours
}

// Compile checks spec and returns its trigger. Refusals wrap ErrInvalid.
func Compile(spec store.ScheduleSpec) (*Trigger, error) {
	t := &Trigger{spec: spec, loc: time.UTC}
	switch {
	case spec.Cron != "" && spec.Every != 0:
		return nil, fmt.Errorf("every: %v given with cron %q; give one of them: %w", spec.Every, spec.Cron, ErrInvalid)
	case spec.Cron == "" && spec.Every == 0:
		return nil, fmt.Errorf("cron: a cron expression or an interval (every) is required: %w", ErrInvalid)
	}
	if spec.TimeZone != "" {
		loc, err := loadZone("time_zone", spec.TimeZone)
		if err != nil {
			return nil, err
		}
		if spec.Cron == "" {
			return nil, fmt.Errorf("time_zone: %q given with an interval, which counts absolute time; a zone applies to a cron spec only: %w",
				spec.TimeZone, ErrInvalid)
		}
		t.loc = loc
	}
	if spec.Cron != "" {
		if err := t.compileCron(); err != nil {
			return nil, err
		}
	} else {
		switch {
		case spec.Every < 0:
			return nil, fmt.Errorf("every: %v is negative: %w", spec.Every, ErrInvalid)
		case spec.Every < MinEvery:
			return nil, fmt.Errorf("every: %v is below the %v minimum: %w", spec.Every, MinEvery, ErrInvalid)
		case spec.Offset < 0:
			return nil, fmt.Errorf("offset: %v is negative: %w", spec.Offset, ErrInvalid)
		case spec.Offset >= spec.Every:
			return nil, fmt.Errorf("offset: %v is not below the interval %v: %w", spec.Offset, spec.Every, ErrInvalid)
		}
	}
	if spec.Cron != "" && spec.Offset != 0 {
		return nil, fmt.Errorf("offset: %v given with cron %q; an offset applies to an interval only: %w", spec.Offset, spec.Cron, ErrInvalid)
	}
	if spec.Jitter < 0 {
		return nil, fmt.Errorf("jitter: %v is negative: %w", spec.Jitter, ErrInvalid)
	}
	if !spec.StartAt.IsZero() && !spec.EndAt.IsZero() && !spec.EndAt.After(spec.StartAt) {
		return nil, fmt.Errorf("end_at: %s is not after start_at %s: %w",
			spec.EndAt.UTC().Format(time.RFC3339Nano), spec.StartAt.UTC().Format(time.RFC3339Nano), ErrInvalid)
	}
	return t, nil
}

func loadZone(field, name string) (*time.Location, error) {
	if name == "Local" {
		// The server's own zone would make a schedule mean something
		// different on each server.
		return nil, fmt.Errorf("%s: %q is the server's zone; name an IANA zone such as Europe/Berlin, or UTC: %w", field, name, ErrInvalid)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%s: %q is not a known IANA time zone: %w", field, name, ErrInvalid)
	}
	return loc, nil
}

func (t *Trigger) compileCron() error {
	expr := strings.TrimSpace(t.spec.Cron)
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		// The parser takes the zone up to the first space; check it here,
		// where the error can name it (and a prefix without fields would
		// crash the parser).
		zone, rest, ok := strings.Cut(expr, " ")
		if !ok || strings.TrimSpace(rest) == "" {
			return fmt.Errorf("cron: %q has a zone and no fields: %w", t.spec.Cron, ErrInvalid)
		}
		_, name, _ := strings.Cut(zone, "=")
		loc, err := loadZone("cron", name)
		if err != nil {
			return err
		}
		if t.spec.TimeZone != "" && loc.String() != t.loc.String() {
			return fmt.Errorf("cron: %q names zone %q and time_zone is %q; give one: %w", t.spec.Cron, name, t.spec.TimeZone, ErrInvalid)
		}
	} else {
		expr = "CRON_TZ=" + t.loc.String() + " " + expr
	}
	if strings.Contains(expr, "@every") {
		// A constant delay counts from whenever it is asked, so no two
		// servers (nor two restarts) would agree on its ticks.
		return fmt.Errorf("cron: %q: @every is not anchored to the clock; use an interval (every, offset) instead: %w", t.spec.Cron, ErrInvalid)
	}
	s, err := parser.Parse(expr)
	if err != nil {
		return fmt.Errorf("cron: %q: %v: %w", t.spec.Cron, err, ErrInvalid)
	}
	spec, ok := s.(*cron.SpecSchedule)
	if !ok {
		return fmt.Errorf("cron: %q is not a calendar expression: %w", t.spec.Cron, ErrInvalid)
	}
	// Feb 29 fires once in four years; the parser looks five years ahead.
	if spec.Next(time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return fmt.Errorf("cron: %q matches no date: %w", t.spec.Cron, ErrInvalid)
	}
	t.cron, t.loc = spec, spec.Location
	t.fixed = spec.Hour&allHours != allHours
	return nil
}

// Spec is the spec the trigger was compiled from.
func (t *Trigger) Spec() store.ScheduleSpec { return t.spec }

// Location is the zone a cron spec is read in (UTC for an interval).
func (t *Trigger) Location() *time.Location { return t.loc }

// Next returns the first tick after after, within the spec's start and end
// times; ok is false when there is none.
func (t *Trigger) Next(after time.Time) (tick time.Time, ok bool) {
	if s := t.spec.StartAt; !s.IsZero() && after.Before(s) {
		after = s.Add(-time.Nanosecond) // a tick at StartAt itself counts
	}
	if t.cron != nil {
		tick = t.nextCron(after)
	} else {
		tick = t.nextInterval(after)
	}
	if tick.IsZero() || (!t.spec.EndAt.IsZero() && !tick.Before(t.spec.EndAt)) {
		return time.Time{}, false
	}
	return tick.UTC(), true
}

func (t *Trigger) nextCron(after time.Time) time.Time {
	for range 4 {
		n := t.cron.Next(after)
		if n.IsZero() || !t.fixed {
			return n
		}
		end, ok := t.repeatEnd(n)
		if !ok {
			return n
		}
		// n is in the hour the clocks went back over, whose wall-clock
		// times all fired already: go on from its end.
		after = end.Add(-time.Nanosecond)
	}
	return time.Time{}
}

// repeatEnd reports whether n's wall-clock time already occurred shortly
// before n (n is in the span the clocks went back over), and if so when
// that span ends.
func (t *Trigger) repeatEnd(n time.Time) (time.Time, bool) {
	_, now := n.In(t.loc).Zone()
	_, before := n.Add(-3 * time.Hour).In(t.loc).Zone()
	if before <= now {
		return time.Time{}, false
	}
	back := time.Duration(before-now) * time.Second
	const wall = "2006-01-02 15:04:05.999999999"
	if n.Add(-back).In(t.loc).Format(wall) != n.In(t.loc).Format(wall) {
		return time.Time{}, false
	}
	// Find the change to the second: offsets change on whole seconds.
	lo, hi := n.Add(-3*time.Hour), n
	for hi.Sub(lo) > time.Second {
		mid := lo.Add(hi.Sub(lo) / 2).Truncate(time.Second)
		if _, off := mid.In(t.loc).Zone(); off == before {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi.Add(back), true
}

func (t *Trigger) nextInterval(after time.Time) time.Time {
	every, off := int64(t.spec.Every), int64(t.spec.Offset)
	x := after.UnixNano() - off
	k := x / every
	if x < 0 && x%every != 0 {
		k-- // floor, not truncation, before the epoch
	}
	return time.Unix(0, (k+1)*every+off)
}

// FireAt is the instant the tick at nominal fires: nominal plus a jitter in
// [0, Jitter) drawn from a hash of the schedule's key and the nominal time,
// so every server and every restart computes the same instant.
func (t *Trigger) FireAt(key string, nominal time.Time) time.Time {
	if t.spec.Jitter <= 0 {
		return nominal
	}
	return nominal.Add(Jitter(key, nominal, t.spec.Jitter))
}

// Jitter is the delay in [0, bound) of the tick at nominal of the schedule
// named key; 0 when bound is not positive.
func Jitter(key string, nominal time.Time, bound time.Duration) time.Duration {
	if bound <= 0 {
		return 0
	}
	h := sha256.Sum256([]byte(key + "\x00" + nominal.UTC().Format(time.RFC3339Nano)))
	return time.Duration(binary.BigEndian.Uint64(h[:8]) % uint64(bound))
}

// Key is what a schedule's jitter is keyed on: its namespace and id.
func Key(namespace, id string) string { return namespace + "/" + id }

// ActionID is the id of what the tick at nominal of schedule id starts: the
// activity id or workflow id `<id>@<nominal time, RFC 3339, UTC>`. Being
// derived from the tick, a second fire of one tick (after a crash, or by
// another server) names the same action and the engine starts it once.
func ActionID(id string, nominal time.Time) string {
	return id + "@" + nominal.UTC().Format(time.RFC3339Nano)
}

// ActionIDLen is the most an ActionID adds to the schedule id's length.
const ActionIDLen = len("@2006-01-02T15:04:05.999999999Z")
