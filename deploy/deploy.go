// Package deploy holds what an operations team installs beside aion: a
// Grafana dashboard (grafana/aion.json), Prometheus alert rules with their
// unit tests (prometheus/), and a KEDA ScaledObject (keda/). README.md says
// what each file is and how to adapt it.
//
// The Go code reads those files back: every query they hold, the series
// selectors and grouping labels of each, and the alert rules. Tests hold
// them to what a running server exports (e2e) and to promtool (this
// package), so the files cannot drift from the code.
package deploy

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// Dashboard is the Grafana dashboard, as committed.
//
//go:embed grafana/aion.json
var Dashboard []byte

// Rules is the Prometheus alert rules file, as committed.
//
//go:embed prometheus/aion-rules.yml
var Rules []byte

// RuleTests is promtool's unit-test file for Rules.
//
//go:embed prometheus/aion-rules.test.yml
var RuleTests []byte

// RecordedScrape is a /metrics scrape of a real server after a known
// workload (see the e2e test TestDashboardAndRulesReadOnlyExportedMetrics),
// the source of the rule tests' input series.
//
//go:embed prometheus/testdata/scrape.prom
var RecordedScrape []byte

// ScaledObject is the KEDA example.
//
//go:embed keda/scaledobject.yaml
var ScaledObject []byte

// PrometheusLabels are the labels Prometheus itself attaches to every
// scraped series; the server never exports them.
var PrometheusLabels = []string{"job", "instance"}

// PrometheusMetrics are the series Prometheus makes for each scrape target
// rather than reading them from /metrics: up is 1 while the target answers.
var PrometheusMetrics = []string{"up"}

// Matcher is one label matcher of a selector: Label Op "Value", Op one of
// =, !=, =~, !~.
type Matcher struct {
	Label, Op, Value string
}

// Selector is a series selector: a metric name and its label matchers.
type Selector struct {
	Metric   string
	Matchers []Matcher
}

// Query is one PromQL expression of a file, with the series it selects and
// the labels its by, without, on, ignoring, group_left and group_right
// clauses name.
type Query struct {
	// Where names the file and the panel, variable or rule holding it.
	Where     string
	Expr      string
	Selectors []Selector
	Grouping  []string
	// ValuesOf, for a Grafana label_values(selector, label) variable, is
	// the label whose values it lists; Selectors then holds the selector.
	ValuesOf string
}

// groupingWords introduce a parenthesised list of label names.
var groupingWords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true}

// keywords are PromQL words that are not metrics: operators, modifiers and
// the aggregations (which may be followed by a by or without clause rather
// than their parenthesis).
var keywords = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true,
	"atan2": true, "inf": true, "nan": true,
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
	"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true}

// ParseQuery finds the selectors and grouping labels of a PromQL expression
// (Grafana's $variables allowed). It reads enough of PromQL to do that and
// refuses what it cannot place: a selector without a metric name, an
// unterminated string, range or matcher list.
func ParseQuery(where, expr string) (Query, error) {
	q := Query{Where: where, Expr: expr}
	s := expr
	fail := func(i int, msg string) (Query, error) {
		return Query{}, fmt.Errorf("%s: query %q at offset %d: %s", where, expr, i, msg)
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			_, n, ok := readString(s[i:])
			if !ok {
				return fail(i, "unterminated string")
			}
			i += n
		case c == '[':
			j := strings.IndexByte(s[i:], ']')
			if j < 0 {
				return fail(i, "unterminated range")
			}
			i += j + 1
		case c == '$':
			i++
			if i < len(s) && s[i] == '{' {
				j := strings.IndexByte(s[i:], '}')
				if j < 0 {
					return fail(i, "unterminated ${variable}")
				}
				i += j + 1
			} else {
				for i < len(s) && isIdent(s[i]) {
					i++
				}
			}
		case c == '{':
			return fail(i, "a selector without a metric name")
		case isDigit(c) || c == '.':
			// A number or a duration (offset 5m): digits, then letters.
			for i < len(s) && (isIdent(s[i]) || s[i] == '.') {
				i++
			}
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdent(s[j]) {
				j++
			}
			word := s[i:j]
			next := skipSpace(s, j)
			lower := strings.ToLower(word)
			switch {
			case groupingWords[lower]:
				i = j
				if next < len(s) && s[next] == '(' {
					end := strings.IndexByte(s[next:], ')')
					if end < 0 {
						return fail(next, "unterminated label list")
					}
					for _, l := range strings.Split(s[next+1:next+end], ",") {
						if l = strings.TrimSpace(l); l != "" {
							q.Grouping = append(q.Grouping, l)
						}
					}
					i = next + end + 1
				}
			case keywords[lower]:
				i = j
			case next < len(s) && s[next] == '(':
				i = j // a function or an aggregation
			default:
				sel := Selector{Metric: word}
				i = j
				if next < len(s) && s[next] == '{' {
					ms, n, err := readMatchers(s[next:])
					if err != nil {
						return fail(next, err.Error())
					}
					sel.Matchers = ms
					i = next + n
				}
				q.Selectors = append(q.Selectors, sel)
			}
		default:
			i++
		}
	}
	return q, nil
}

// readMatchers reads {label op "value", …} at the start of s and returns
// the matchers and the bytes read.
func readMatchers(s string) ([]Matcher, int, error) {
	var out []Matcher
	i := 1
	for {
		for i < len(s) && (s[i] == ' ' || s[i] == ',' || s[i] == '\n' || s[i] == '\t') {
			i++
		}
		if i >= len(s) {
			return nil, 0, fmt.Errorf("unterminated matcher list")
		}
		if s[i] == '}' {
			return out, i + 1, nil
		}
		j := i
		for j < len(s) && isIdent(s[j]) {
			j++
		}
		if j == i {
			return nil, 0, fmt.Errorf("a matcher without a label name")
		}
		m := Matcher{Label: s[i:j]}
		j = skipSpace(s, j)
		for _, op := range []string{"=~", "!~", "!=", "="} {
			if strings.HasPrefix(s[j:], op) {
				m.Op = op
				break
			}
		}
		if m.Op == "" {
			return nil, 0, fmt.Errorf("matcher on %q has no operator", m.Label)
		}
		j = skipSpace(s, j+len(m.Op))
		v, n, ok := readString(s[j:])
		if !ok {
			return nil, 0, fmt.Errorf("matcher on %q has no quoted value", m.Label)
		}
		m.Value = v
		out = append(out, m)
		i = j + n
	}
}

// readString reads a quoted string at the start of s: its value, the bytes
// read, and whether it was one.
func readString(s string) (string, int, bool) {
	if s == "" || (s[0] != '"' && s[0] != '\'' && s[0] != '`') {
		return "", 0, false
	}
	q := s[0]
	var b strings.Builder
	for i := 1; i < len(s); i++ {
		switch {
		case s[i] == q:
			return b.String(), i + 1, true
		case s[i] == '\\' && q != '`' && i+1 < len(s):
			i++
			b.WriteByte(s[i])
		default:
			b.WriteByte(s[i])
		}
	}
	return "", 0, false
}

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t') {
		i++
	}
	return i
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isIdent(c byte) bool { return isIdentStart(c) || isDigit(c) }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// labelValues matches a Grafana label_values(selector, label) query.
var labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$`)

// DashboardPanel is one panel of the dashboard with the expressions of its
// targets.
type DashboardPanel struct {
	ID    int
	Title string
	Type  string
	Exprs []string
}

type dashboardJSON struct {
	Title      string       `json:"title"`
	UID        string       `json:"uid"`
	Panels     []panelJSON  `json:"panels"`
	Templating templateJSON `json:"templating"`
}

type panelJSON struct {
	ID      int         `json:"id"`
	Title   string      `json:"title"`
	Type    string      `json:"type"`
	Panels  []panelJSON `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

type templateJSON struct {
	List []struct {
		Name  string          `json:"name"`
		Type  string          `json:"type"`
		Query json.RawMessage `json:"query"`
	} `json:"list"`
}

// DashboardPanels returns every panel of the dashboard, those inside
// collapsed rows included, in order.
func DashboardPanels() ([]DashboardPanel, error) {
	var d dashboardJSON
	if err := json.Unmarshal(Dashboard, &d); err != nil {
		return nil, fmt.Errorf("grafana/aion.json: %w", err)
	}
	var out []DashboardPanel
	var walk func([]panelJSON)
	walk = func(ps []panelJSON) {
		for _, p := range ps {
			dp := DashboardPanel{ID: p.ID, Title: p.Title, Type: p.Type}
			for _, t := range p.Targets {
				dp.Exprs = append(dp.Exprs, t.Expr)
			}
			out = append(out, dp)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out, nil
}

// DashboardQueries returns the query of every panel target and of every
// query variable of the dashboard.
func DashboardQueries() ([]Query, error) {
	panels, err := DashboardPanels()
	if err != nil {
		return nil, err
	}
	var out []Query
	for _, p := range panels {
		for i, e := range p.Exprs {
			q, err := ParseQuery(fmt.Sprintf("grafana/aion.json: panel %q target %d", p.Title, i), e)
			if err != nil {
				return nil, err
			}
			out = append(out, q)
		}
	}
	var d dashboardJSON
	if err := json.Unmarshal(Dashboard, &d); err != nil {
		return nil, fmt.Errorf("grafana/aion.json: %w", err)
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		where := fmt.Sprintf("grafana/aion.json: variable %q", v.Name)
		var text string
		var obj struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &text); err != nil {
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				return nil, fmt.Errorf("%s: query is neither a string nor an object: %w", where, err)
			}
			text = obj.Query
		}
		m := labelValues.FindStringSubmatch(text)
		if m == nil {
			return nil, fmt.Errorf("%s: %q is not label_values(selector, label)", where, text)
		}
		q, err := ParseQuery(where, m[1])
		if err != nil {
			return nil, err
		}
		q.Expr, q.ValuesOf = text, m[2]
		out = append(out, q)
	}
	return out, nil
}

// Alert is one alerting rule of the rules file.
type Alert struct {
	Name, Expr, For string
	Labels          map[string]string
	Annotations     map[string]string
}

// Alerts reads the alerting rules of the rules file. It reads the layout
// the file keeps (each rule a "- alert:" item with expr, for, labels and
// annotations; multi-line values as block scalars), which promtool
// checks is valid YAML with the meaning read here.
func Alerts() ([]Alert, error) {
	lines := strings.Split(string(Rules), "\n")
	var out []Alert
	var cur *Alert
	section := "" // "labels" or "annotations" while inside one
	sectionIndent := 0
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		trimmed := strings.TrimSpace(line)
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		indent := len(line) - len(strings.TrimLeft(line, " "))
		if name, ok := strings.CutPrefix(trimmed, "- alert:"); ok {
			out = append(out, Alert{Name: strings.TrimSpace(name), Labels: map[string]string{}, Annotations: map[string]string{}})
			cur, section = &out[len(out)-1], ""
			continue
		}
		if strings.HasPrefix(trimmed, "- ") {
			cur = nil // another list item: a group
			continue
		}
		if cur == nil {
			continue
		}
		key, value, ok := strings.Cut(trimmed, ":")
		if !ok {
			return nil, fmt.Errorf("prometheus/aion-rules.yml:%d: %q is not key: value", i+1, trimmed)
		}
		value = strings.TrimSpace(value)
		if value == ">-" || value == ">" || value == "|" || value == "|-" {
			var parts []string
			for i+1 < len(lines) {
				nl := lines[i+1]
				nt := strings.TrimSpace(nl)
				if nt != "" && len(nl)-len(strings.TrimLeft(nl, " ")) <= indent {
					break
				}
				parts = append(parts, nt)
				i++
			}
			sep := " "
			if value[0] == '|' {
				sep = "\n"
			}
			value = strings.TrimSpace(strings.Join(parts, sep))
		} else if v, n, ok := readString(value); ok && n == len(value) {
			value = v
		}
		switch {
		case section == "labels" && indent > sectionIndent:
			cur.Labels[key] = value
		case section == "annotations" && indent > sectionIndent:
			cur.Annotations[key] = value
		case key == "labels" || key == "annotations":
			section, sectionIndent = key, indent
		case key == "expr":
			cur.Expr, section = value, ""
		case key == "for":
			cur.For, section = value, ""
		default:
			section = ""
		}
	}
	return out, nil
}

// RuleQueries returns the expression of every alerting rule.
func RuleQueries() ([]Query, error) {
	alerts, err := Alerts()
	if err != nil {
		return nil, err
	}
	var out []Query
	for _, a := range alerts {
		q, err := ParseQuery(fmt.Sprintf("prometheus/aion-rules.yml: alert %s (%s)", a.Name, a.Labels["severity"]), a.Expr)
		if err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	return out, nil
}

// kedaQuery matches the prometheus trigger's query line of the KEDA
// example.
var kedaQuery = regexp.MustCompile(`(?m)^\s*query:\s*(.+)$`)

// ScaledObjectQueries returns the query of each prometheus trigger of the
// KEDA example.
func ScaledObjectQueries() ([]Query, error) {
	var out []Query
	for _, m := range kedaQuery.FindAllStringSubmatch(string(ScaledObject), -1) {
		expr := strings.TrimSpace(m[1])
		if v, n, ok := readString(expr); ok && n == len(expr) {
			expr = v
		}
		q, err := ParseQuery("keda/scaledobject.yaml: trigger", expr)
		if err != nil {
			return nil, err
		}
		out = append(out, q)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("keda/scaledobject.yaml: no query: line")
	}
	return out, nil
}

// AllQueries is every query of the dashboard, the rules and the KEDA
// example.
func AllQueries() ([]Query, error) {
	var out []Query
	for _, f := range []func() ([]Query, error){DashboardQueries, RuleQueries, ScaledObjectQueries} {
		qs, err := f()
		if err != nil {
			return nil, err
		}
		out = append(out, qs...)
	}
	return out, nil
}
