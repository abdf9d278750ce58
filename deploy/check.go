package deploy

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// alternatives matches a regex matcher value that is only alternatives of
// plain words (failed|timed_out), whose words can be checked one by one.
var alternatives = regexp.MustCompile(`^[A-Za-z0-9_]+(\|[A-Za-z0-9_]+)*$`)

// Check reports every way the query reaches past what the scrape exports:
// a metric no sample has, a label its samples do not carry, a value of a
// label that no sample shows and the metric's HELP does not name, a
// grouping label none of the query's metrics carries. The labels
// Prometheus attaches (job, instance) and the series it makes (up) are
// allowed.
func Check(q Query, e Exposition) []error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", q.Where, fmt.Sprintf(format, a...)))
	}
	values := e.LabelValues()
	present := map[string]bool{}
	for _, s := range e.Samples {
		present[s.Name] = true
	}
	known := slices.Clone(PrometheusLabels) // labels the query may group by
	for _, sel := range q.Selectors {
		if slices.Contains(PrometheusMetrics, sel.Metric) {
			for _, m := range sel.Matchers {
				if !slices.Contains(PrometheusLabels, m.Label) {
					bad("%s has only the labels %v, not %q", sel.Metric, PrometheusLabels, m.Label)
				}
			}
			continue
		}
		if !present[sel.Metric] {
			bad("metric %s is not exported", sel.Metric)
			continue
		}
		for l := range values[sel.Metric] {
			known = append(known, l)
		}
		help := helpWords(e.Help[e.Family(sel.Metric)])
		for _, m := range sel.Matchers {
			if slices.Contains(PrometheusLabels, m.Label) {
				continue
			}
			seen, ok := values[sel.Metric][m.Label]
			if !ok {
				bad("%s has no label %q", sel.Metric, m.Label)
				continue
			}
			if strings.Contains(m.Value, "$") {
				continue // a dashboard variable
			}
			var words []string
			switch {
			case m.Op == "=" || m.Op == "!=":
				words = []string{m.Value}
			case alternatives.MatchString(m.Value):
				words = strings.Split(m.Value, "|")
			}
			for _, w := range words {
				if !seen[w] && !help[w] {
					bad("%s{%s=%q}: no sample has that value and its HELP does not name it", sel.Metric, m.Label, w)
				}
			}
		}
	}
	for _, g := range q.Grouping {
		if !slices.Contains(known, g) {
			bad("groups by %q, a label none of its metrics carries", g)
		}
	}
	if q.ValuesOf != "" && !slices.Contains(known, q.ValuesOf) {
		bad("lists the values of %q, a label its metric does not carry", q.ValuesOf)
	}
	return errs
}

// helpWords returns the words of a HELP text.
func helpWords(help string) map[string]bool {
	out := map[string]bool{}
	for _, w := range strings.FieldsFunc(help, func(r rune) bool {
		return !(r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'))
	}) {
		out[w] = true
	}
	return out
}
