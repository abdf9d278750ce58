package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// promtool returns the path of promtool. With CI=true a missing promtool
// fails the test (CI installs Debian's prometheus package); elsewhere it
// skips it.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool is not installed (apt-get install prometheus): %v", err)
		}
		t.Skipf("promtool is not installed (apt-get install prometheus): %v", err)
	}
	return path
}

// TestRulesPassPromtool: promtool finds the rules valid, counts as many
// as this package reads, and every unit test of aion-rules.test.yml
// passes. promtool reads files and opens no port.
func TestRulesPassPromtool(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir = "prometheus"
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	out := run("check", "rules", "aion-rules.yml")
	m := regexp.MustCompile(`SUCCESS: (\d+) rules found`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("promtool check rules said %q, want SUCCESS: N rules found", out)
	}
	alerts, err := Alerts()
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := strconv.Atoi(m[1]); n != len(alerts) {
		t.Fatalf("promtool found %d rules, this package reads %d: the rules file left the layout Alerts reads", n, len(alerts))
	}
	out = run("test", "rules", "aion-rules.test.yml")
	if !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules said %q, want SUCCESS", out)
	}
}

// dashboardVars are values for the dashboard's variables, as Grafana
// substitutes them, so promtool can parse the queries.
var dashboardVars = strings.NewReplacer("${datasource}", "x", "$__rate_interval", "1m", "$job", "aion",
	"$namespace", ".*", "$task_queue", ".*")

// TestDashboardAndKEDAQueriesParseWithPromtool: every panel query (its
// variables substituted) and the KEDA query is PromQL that promtool
// accepts, checked as recording rules of a scratch rules file.
func TestDashboardAndKEDAQueriesParseWithPromtool(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	qs, err := DashboardQueries()
	if err != nil {
		t.Fatal(err)
	}
	keda, err := ScaledObjectQueries()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("groups:\n  - name: queries\n    rules:\n")
	n := 0
	for _, q := range append(qs, keda...) {
		if q.ValuesOf != "" {
			continue // label_values() is Grafana's, not PromQL
		}
		n++
		expr, _ := json.Marshal(dashboardVars.Replace(q.Expr))
		fmt.Fprintf(&b, "      - record: query:%d\n        expr: %s\n", n, expr)
	}
	path := filepath.Join(t.TempDir(), "queries.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "check", "rules", path).CombinedOutput()
	if err != nil || !strings.Contains(string(out), fmt.Sprintf("SUCCESS: %d rules found", n)) {
		t.Fatalf("promtool check rules on the %d queries: %v\n%s", n, err, out)
	}
}

// TestQueriesReadOnlyTheRecordedScrape checks every query of the
// dashboard, the rules and the KEDA example against the recorded scrape
// (the e2e test checks them against a live server).
func TestQueriesReadOnlyTheRecordedScrape(t *testing.T) {
	t.Parallel()
	e, err := ParseExposition(RecordedScrape)
	if err != nil {
		t.Fatal(err)
	}
	qs, err := AllQueries()
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) < 40 {
		t.Fatalf("only %d queries found in the dashboard, rules and KEDA example", len(qs))
	}
	for _, q := range qs {
		if len(q.Selectors) == 0 {
			t.Errorf("%s: %q selects no series", q.Where, q.Expr)
		}
		for _, err := range Check(q, e) {
			t.Error(err)
		}
	}
}

// exposition is a small scrape for the checker's own tests.
const exposition = `# HELP aion_activities_closed_total Activities that reached a terminal state, by state: completed, failed, canceled, timed_out.
# TYPE aion_activities_closed_total counter
aion_activities_closed_total{namespace="shop",state="completed"} 3
# HELP aion_backlog_activities Activities ready and waiting for a worker, by pool.
# TYPE aion_backlog_activities gauge
aion_backlog_activities{namespace="reports",task_queue="default"} 1
# HELP aion_store_commit_seconds Duration of one group-commit transaction.
# TYPE aion_store_commit_seconds histogram
aion_store_commit_seconds_bucket{le="0.1"} 2
aion_store_commit_seconds_bucket{le="+Inf"} 2
aion_store_commit_seconds_sum 0.01
aion_store_commit_seconds_count 2
`

func TestCheckFindsWhatTheScrapeDoesNotExport(t *testing.T) {
	t.Parallel()
	e, err := ParseExposition([]byte(exposition))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, expr, valuesOf string
		want                 string // a part of the one error; "" for none
	}{
		{"exported counter", `sum by (namespace, state) (rate(aion_activities_closed_total{job="aion", state="completed"}[5m]))`, "", ""},
		{"value named by HELP only", `aion_activities_closed_total{state="timed_out"}`, "", ""},
		{"alternatives named", `aion_activities_closed_total{state=~"failed|timed_out"}`, "", ""},
		{"regex left alone", `aion_activities_closed_total{state=~"fail.*"}`, "", ""},
		{"dashboard variable left alone", `aion_activities_closed_total{namespace=~"$namespace"}`, "", ""},
		{"histogram series", `histogram_quantile(0.99, sum by (instance, le) (rate(aion_store_commit_seconds_bucket[5m])))`, "", ""},
		{"prometheus's up", `absent(up{job="aion"} == 1)`, "", ""},
		{"label_values of a carried label", `aion_backlog_activities`, "task_queue", ""},
		{"renamed metric", `rate(aion_activities_completed_total[5m])`, "", "metric aion_activities_completed_total is not exported"},
		{"histogram without suffix", `rate(aion_store_commit_seconds[5m])`, "", "metric aion_store_commit_seconds is not exported"},
		{"label not carried", `aion_activities_closed_total{outcome="completed"}`, "", `has no label "outcome"`},
		{"value never seen nor named", `aion_activities_closed_total{state="succeeded"}`, "", `state="succeeded"`},
		{"one alternative unknown", `aion_activities_closed_total{state=~"failed|lost"}`, "", `state="lost"`},
		{"grouping label not carried", `sum by (task_queue) (aion_activities_closed_total)`, "", `groups by "task_queue"`},
		{"label_values of a label not carried", `aion_activities_closed_total`, "task_queue", `values of "task_queue"`},
		{"up with a label of its own", `up{namespace="shop"}`, "", `not "namespace"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			q, err := ParseQuery("test", c.expr)
			if err != nil {
				t.Fatal(err)
			}
			q.ValuesOf = c.valuesOf
			errs := Check(q, e)
			switch {
			case c.want == "" && len(errs) > 0:
				t.Fatalf("Check(%q) = %v, want no error", c.expr, errs)
			case c.want != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), c.want)):
				t.Fatalf("Check(%q) = %v, want one error containing %q", c.expr, errs, c.want)
			}
		})
	}
}

func TestParseQueryFindsSelectorsAndGroupingLabels(t *testing.T) {
	t.Parallel()
	cases := []struct {
		expr     string
		metrics  []string
		grouping []string
		matchers []Matcher // of the first selector
	}{
		{`max by (namespace, task_queue) (aion_backlog_oldest_age_seconds) > 300`,
			[]string{"aion_backlog_oldest_age_seconds"}, []string{"namespace", "task_queue"}, nil},
		{`(max by (namespace, task_queue) (aion_backlog_activities) > 0) unless on (namespace) (sum by (namespace) (aion_workers_connected) > 0)`,
			[]string{"aion_backlog_activities", "aion_workers_connected"}, []string{"namespace", "task_queue", "namespace", "namespace"}, nil},
		{`sum(rate(a_total{job=~"$job", code!="OK", method!~".*/Wait"}[$__rate_interval])) by (code) offset 5m`,
			[]string{"a_total"}, []string{"code"},
			[]Matcher{{"job", "=~", "$job"}, {"code", "!=", "OK"}, {"method", "!~", ".*/Wait"}}},
		{`time() - process_start_time_seconds{job=~"${job}"}`, []string{"process_start_time_seconds"}, nil,
			[]Matcher{{"job", "=~", "${job}"}}},
		{`label_replace(x, "dst", "$1", "src", "(.*)") and bool y`, []string{"x", "y"}, nil, nil},
		{`a * on (instance) group_left (version) b`, []string{"a", "b"}, []string{"instance", "version"}, nil},
		{`histogram_quantile(0.99, sum without (instance) (rate(h_bucket[5m]))) > 1e3`, []string{"h_bucket"}, []string{"instance"}, nil},
	}
	for _, c := range cases {
		q, err := ParseQuery("test", c.expr)
		if err != nil {
			t.Errorf("ParseQuery(%q): %v", c.expr, err)
			continue
		}
		var metrics []string
		for _, s := range q.Selectors {
			metrics = append(metrics, s.Metric)
		}
		if !slices.Equal(metrics, c.metrics) || !slices.Equal(q.Grouping, c.grouping) {
			t.Errorf("ParseQuery(%q): metrics %v grouping %v, want %v and %v", c.expr, metrics, q.Grouping, c.metrics, c.grouping)
		}
		if c.matchers != nil && !slices.Equal(q.Selectors[0].Matchers, c.matchers) {
			t.Errorf("ParseQuery(%q): matchers %v, want %v", c.expr, q.Selectors[0].Matchers, c.matchers)
		}
	}
	for _, bad := range []string{`{__name__="x"}`, `x{a="b"`, `x{a}`, `rate(x[5m)`, `x{a="b}`} {
		if _, err := ParseQuery("test", bad); err == nil {
			t.Errorf("ParseQuery(%q) took it; want an error", bad)
		}
	}
}

func TestParseExpositionReadsSeriesHelpAndFamilies(t *testing.T) {
	t.Parallel()
	e, err := ParseExposition([]byte(exposition))
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Samples) != 6 {
		t.Fatalf("%d samples, want 6", len(e.Samples))
	}
	if got := e.Samples[1].Key(); got != `aion_backlog_activities{namespace="reports",task_queue="default"}` || e.Samples[1].Value != 1 {
		t.Fatalf("sample 1: %s %v", got, e.Samples[1].Value)
	}
	for series, family := range map[string]string{"aion_store_commit_seconds_bucket": "aion_store_commit_seconds",
		"aion_store_commit_seconds_count": "aion_store_commit_seconds", "aion_activities_closed_total": "aion_activities_closed_total"} {
		if got := e.Family(series); got != family {
			t.Errorf("Family(%s) = %s, want %s", series, got, family)
		}
	}
	if !strings.Contains(e.Help["aion_activities_closed_total"], "timed_out") {
		t.Fatalf("HELP of aion_activities_closed_total: %q", e.Help["aion_activities_closed_total"])
	}
	if _, err := ParseExposition([]byte("aion_x{a=\"b\"} not-a-number\n")); err == nil {
		t.Fatal("a sample without a number parsed")
	}
}

// anchors returns the GitHub anchors of a Markdown file's headings.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for line := range strings.Lines(string(b)) {
		h, ok := strings.CutPrefix(line, "#")
		if !ok {
			continue
		}
		h = strings.ToLower(strings.TrimSpace(strings.TrimLeft(h, "#")))
		var a strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				a.WriteRune('-')
			case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'):
				a.WriteRune(r)
			}
		}
		out[a.String()] = true
	}
	return out
}

// TestEveryAlertSaysWhatAndWhereAndLinksItsRunbook: each alert has a
// severity, a summary and a description that name every label it groups
// by (the pool, the namespace, the server), and a runbook link to a
// section of docs/operations.md that exists.
func TestEveryAlertSaysWhatAndWhereAndLinksItsRunbook(t *testing.T) {
	t.Parallel()
	alerts, err := Alerts()
	if err != nil {
		t.Fatal(err)
	}
	if len(alerts) < 12 {
		t.Fatalf("%d alerts read", len(alerts))
	}
	ops := anchors(t, "../docs/operations.md")
	for _, a := range alerts {
		if s := a.Labels["severity"]; s != "warning" && s != "critical" {
			t.Errorf("%s: severity %q, want warning or critical", a.Name, s)
		}
		for _, k := range []string{"summary", "description", "runbook_url"} {
			if a.Annotations[k] == "" {
				t.Errorf("%s: no %s annotation", a.Name, k)
			}
		}
		anchor, ok := strings.CutPrefix(a.Annotations["runbook_url"], "docs/operations.md#")
		if !ok || !ops[anchor] {
			t.Errorf("%s: runbook_url %q is not a section of docs/operations.md", a.Name, a.Annotations["runbook_url"])
		}
		if !strings.Contains(a.Annotations["description"], "Runbook: "+a.Annotations["runbook_url"]) {
			t.Errorf("%s: the description does not end with its runbook", a.Name)
		}
		q, err := ParseQuery(a.Name, a.Expr)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range q.Grouping {
			if g == "le" || g == "job" {
				continue
			}
			for _, k := range []string{"summary", "description"} {
				if !strings.Contains(a.Annotations[k], "$labels."+g) {
					t.Errorf("%s: its %s does not name the %s it groups by", a.Name, k, g)
				}
			}
		}
	}
}

// ruleCheck is one alert_rule_test item: an alert at a time, and the
// severities expected firing ([] when none).
type ruleCheck struct {
	alert      string
	severities []string
}

// ruleChecks reads the alert_rule_test items of the rule tests.
func ruleChecks(t *testing.T) []ruleCheck {
	t.Helper()
	var out []ruleCheck
	for line := range strings.Lines(string(RuleTests)) {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "alertname:"):
			out = append(out, ruleCheck{alert: strings.TrimSpace(strings.TrimPrefix(line, "alertname:"))})
		case strings.HasPrefix(line, "severity:") && len(out) > 0:
			v := strings.Trim(strings.TrimSpace(strings.TrimPrefix(line, "severity:")), `"`)
			out[len(out)-1].severities = append(out[len(out)-1].severities, v)
		}
	}
	return out
}

// TestEveryAlertIsTestedFiringAndQuiet: the rule tests check each alert,
// at each severity, where it fires, and each alert where it must not.
func TestEveryAlertIsTestedFiringAndQuiet(t *testing.T) {
	t.Parallel()
	alerts, err := Alerts()
	if err != nil {
		t.Fatal(err)
	}
	checks := ruleChecks(t)
	for _, a := range alerts {
		fires, quiet := false, false
		for _, c := range checks {
			if c.alert != a.Name {
				continue
			}
			fires = fires || slices.Contains(c.severities, a.Labels["severity"])
			quiet = quiet || len(c.severities) == 0
		}
		if !fires {
			t.Errorf("%s (%s): no rule test where it fires", a.Name, a.Labels["severity"])
		}
		if !quiet {
			t.Errorf("%s: no rule test where it must not fire", a.Name)
		}
	}
}

var (
	inputSeries = regexp.MustCompile(`(?m)^\s*- series: '(.*)'\n\s*values: '(.*)'$`)
	firstValue  = regexp.MustCompile(`^-?[0-9.]+`)
)

// TestRuleTestsStartFromTheRecordedScrape: every input series of the rule
// tests is a series of the recorded scrape (its name with the same label
// names, plus job and instance; each label value one the recording shows
// for that label, or one the metric's HELP names), starting from its
// recorded value, or from 0 (or no sample yet) when the recording lacks
// it; up carries only job and instance.
func TestRuleTestsStartFromTheRecordedScrape(t *testing.T) {
	t.Parallel()
	rec, err := ParseExposition(RecordedScrape)
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[string]float64{}
	seenValues := map[string]map[string]bool{}
	for _, s := range rec.Samples {
		recorded[s.Key()] = s.Value
		for k, v := range s.Labels {
			if seenValues[k] == nil {
				seenValues[k] = map[string]bool{}
			}
			seenValues[k][v] = true
		}
	}
	labelSets := rec.LabelSets()
	inputs := inputSeries.FindAllStringSubmatch(string(RuleTests), -1)
	if len(inputs) < 30 {
		t.Fatalf("only %d input series read from the rule tests", len(inputs))
	}
	for _, in := range inputs {
		series, values := in[1], in[2]
		q, err := ParseQuery("rule tests", series)
		if err != nil || len(q.Selectors) != 1 {
			t.Errorf("input series %q: %v", series, err)
			continue
		}
		sel := q.Selectors[0]
		labels := map[string]string{}
		for _, m := range sel.Matchers {
			labels[m.Label] = m.Value
		}
		if labels["job"] != "aion" || labels["instance"] == "" {
			t.Errorf("input series %s: want job=\"aion\" and an instance, as Prometheus attaches them", series)
		}
		delete(labels, "job")
		delete(labels, "instance")
		if slices.Contains(PrometheusMetrics, sel.Metric) {
			if len(labels) > 0 {
				t.Errorf("input series %s: %s carries only job and instance", series, sel.Metric)
			}
			continue
		}
		names := strings.Join(slices.Sorted(maps.Keys(labels)), ",")
		if !labelSets[sel.Metric][names] {
			t.Errorf("input series %s: the recorded scrape has no %s with labels {%s}", series, sel.Metric, names)
			continue
		}
		help := helpWords(rec.Help[rec.Family(sel.Metric)])
		for k, v := range labels {
			if !seenValues[k][v] && !help[v] && k != "le" {
				t.Errorf("input series %s: %s=%q is neither recorded nor named by the HELP of %s", series, k, v, sel.Metric)
			}
		}
		want, ok := recorded[SeriesKey(sel.Metric, labels)]
		if !ok && labels["le"] != "" {
			t.Errorf("input series %s: a bucket the recorded scrape lacks", series)
		}
		if !ok && strings.HasPrefix(values, "_") {
			continue // no sample yet: a series that appears later
		}
		got, err := strconv.ParseFloat(firstValue.FindString(values), 64)
		if err != nil || got != want {
			t.Errorf("input series %s starts at %q, want its recorded value %v", series, values, want)
		}
	}
}

// TestDashboardIsWellFormed: panels have unique ids, titles, descriptions
// and queries on the dashboard's data source variable; the variables the
// queries use exist.
func TestDashboardIsWellFormed(t *testing.T) {
	t.Parallel()
	var d struct {
		UID        string `json:"uid"`
		Templating struct {
			List []struct {
				Name string `json:"name"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(Dashboard, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" {
		t.Error("no uid: provisioning would make a new dashboard each time")
	}
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
	}
	for _, v := range []string{"datasource", "job", "namespace", "task_queue"} {
		if !slices.Contains(vars, v) {
			t.Errorf("no variable %q (variables: %v)", v, vars)
		}
	}
	panels, err := DashboardPanels()
	if err != nil {
		t.Fatal(err)
	}
	ids := map[int]bool{}
	for _, p := range panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if p.Title == "" || len(p.Exprs) == 0 {
			t.Errorf("panel %d %q: want a title and at least one query", p.ID, p.Title)
		}
	}
	if strings.Count(string(Dashboard), `"uid": "${datasource}"`) < len(panels) {
		t.Error("a panel or target does not use the ${datasource} variable")
	}
	used := regexp.MustCompile(`\$\{?([a-z_]+)`).FindAllStringSubmatch(string(Dashboard), -1)
	for _, u := range used {
		if !strings.HasPrefix(u[1], "__") && !slices.Contains(vars, u[1]) && u[1] != "labels" && u[1] != "value" {
			t.Errorf("the dashboard uses $%s, which is no variable", u[1])
		}
	}
}

// TestScaledObjectScalesOnOnePoolsBacklog: the KEDA example's trigger reads
// the backlog of one pool, with max over the servers (each reports the
// whole cluster's backlog).
func TestScaledObjectScalesOnOnePoolsBacklog(t *testing.T) {
	t.Parallel()
	qs, err := ScaledObjectQueries()
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 1 || len(qs[0].Selectors) != 1 || qs[0].Selectors[0].Metric != "aion_backlog_activities" {
		t.Fatalf("queries %+v, want one on aion_backlog_activities", qs)
	}
	if !strings.HasPrefix(qs[0].Expr, "max(") {
		t.Errorf("query %q: want max over the servers, not a sum", qs[0].Expr)
	}
	eq := map[string]bool{}
	for _, m := range qs[0].Selectors[0].Matchers {
		if m.Op == "=" {
			eq[m.Label] = true
		}
	}
	if !eq["namespace"] || !eq["task_queue"] {
		t.Errorf("query %q: want one pool, namespace and task_queue named with =", qs[0].Expr)
	}
	for _, k := range []string{"threshold:", "activationThreshold:", "scaleTargetRef:"} {
		if !strings.Contains(string(ScaledObject), k) {
			t.Errorf("no %s in the ScaledObject", k)
		}
	}
}

// TestReadmeExplainsEveryFile: deploy/README.md names every file of the
// folder that an operator installs, and docs/operations.md links to them.
func TestReadmeExplainsEveryFile(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	ops, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	err = filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(path, ".go") || path == "README.md" {
			return err
		}
		files = append(files, filepath.ToSlash(path))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("files %v", files)
	}
	var missing []error
	for _, f := range files {
		if !strings.Contains(string(readme), f) {
			missing = append(missing, fmt.Errorf("deploy/README.md does not name %s", f))
		}
		if !strings.HasPrefix(f, "prometheus/testdata/") && !strings.Contains(string(ops), "deploy/"+f) {
			missing = append(missing, fmt.Errorf("docs/operations.md does not link deploy/%s", f))
		}
	}
	if err := errors.Join(missing...); err != nil {
		t.Fatal(err)
	}
}
