package deploy

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Sample is one line of a scrape in the Prometheus text format: a series
// (name and labels) and its value.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Key is the series in the text format's own spelling, labels sorted:
// name{a="x",b="y"}.
func (s Sample) Key() string { return SeriesKey(s.Name, s.Labels) }

// SeriesKey spells a series as the text format does, labels sorted.
func SeriesKey(name string, labels map[string]string) string {
	if len(labels) == 0 {
		return name
	}
	var b strings.Builder
	b.WriteString(name)
	b.WriteByte('{')
	for i, k := range slices.Sorted(maps.Keys(labels)) {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", k, labels[k])
	}
	b.WriteByte('}')
	return b.String()
}

// Exposition is a parsed scrape.
type Exposition struct {
	Samples []Sample
	// Help is each metric family's HELP text, by family name (a
	// histogram's, not its _bucket, _sum and _count series').
	Help map[string]string
	// Type is each family's TYPE.
	Type map[string]string
}

// ParseExposition reads a scrape in the Prometheus text format (version
// 0.0.4, as the server serves it).
func ParseExposition(text []byte) (Exposition, error) {
	e := Exposition{Help: map[string]string{}, Type: map[string]string{}}
	for n, line := range strings.Split(string(text), "\n") {
		if line == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			name, help, _ := strings.Cut(rest, " ")
			e.Help[name] = strings.NewReplacer(`\\`, `\`, `\n`, "\n").Replace(help)
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(rest, " ")
			e.Type[name] = typ
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return Exposition{}, fmt.Errorf("line %d %q: %w", n+1, line, err)
		}
		e.Samples = append(e.Samples, s)
	}
	return e, nil
}

func parseSample(line string) (Sample, error) {
	s := Sample{Labels: map[string]string{}}
	i := 0
	for i < len(line) && isIdent(line[i]) {
		i++
	}
	if i == 0 {
		return Sample{}, fmt.Errorf("no metric name")
	}
	s.Name = line[:i]
	if i < len(line) && line[i] == '{' {
		ms, n, err := readMatchers(line[i:])
		if err != nil {
			return Sample{}, err
		}
		for _, m := range ms {
			if m.Op != "=" {
				return Sample{}, fmt.Errorf("label %q: %q is not =", m.Label, m.Op)
			}
			s.Labels[m.Label] = m.Value
		}
		i += n
	}
	fields := strings.Fields(line[i:])
	if len(fields) < 1 || len(fields) > 2 {
		return Sample{}, fmt.Errorf("want a value and at most a timestamp after the series")
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return Sample{}, fmt.Errorf("value: %w", err)
	}
	s.Value = v
	return s, nil
}

// Family returns the family name a series belongs to: the name itself, or
// for a histogram's or summary's _bucket, _sum and _count series the name
// without the suffix.
func (e Exposition) Family(series string) string {
	if _, ok := e.Type[series]; ok {
		return series
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(series, suf); ok {
			if t := e.Type[base]; t == "histogram" || t == "summary" {
				return base
			}
		}
	}
	return series
}

// LabelSets returns, for each series name, the distinct sets of label
// names its samples carry (each set sorted and joined with commas).
func (e Exposition) LabelSets() map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, s := range e.Samples {
		if out[s.Name] == nil {
			out[s.Name] = map[string]bool{}
		}
		out[s.Name][strings.Join(slices.Sorted(maps.Keys(s.Labels)), ",")] = true
	}
	return out
}

// LabelValues returns, for each series name, each label's values seen.
func (e Exposition) LabelValues() map[string]map[string]map[string]bool {
	out := map[string]map[string]map[string]bool{}
	for _, s := range e.Samples {
		if out[s.Name] == nil {
			out[s.Name] = map[string]map[string]bool{}
		}
		for k, v := range s.Labels {
			if out[s.Name][k] == nil {
				out[s.Name][k] = map[string]bool{}
			}
			out[s.Name][k][v] = true
		}
	}
	return out
}
