package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/aion-run/aion/client"
)

// emit prints v as indented JSON with --output json, otherwise calls text.
func (a *app) emit(v any, text func(w io.Writer)) error {
	if a.output == "json" {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(a.stdout, "%s\n", b)
		return err
	}
	text(a.stdout)
	return nil
}

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format(time.RFC3339Nano)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writePlacement prints, through row, what places work in its pool and the
// schedule tick that started it, leaving out what holds defaults.
func writePlacement(row func(k, v string), priority int, fairness string, weight int, concurrency, schedule string, tick time.Time) {
	if priority != 0 && priority != 3 {
		row("priority", fmt.Sprint(priority))
	}
	if fairness != "" || weight > 1 {
		row("fairness key", fmt.Sprintf("%s (weight %d)", orDash(fairness), max(weight, 1)))
	}
	if concurrency != "" {
		row("concurrency key", concurrency)
	}
	if schedule != "" {
		row("schedule", schedule+" tick "+when(tick))
	}
}

// writeActivity prints one activity as aligned "key: value" lines.
func writeActivity(w io.Writer, act *client.Activity) {
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("id", act.ID)
	row("namespace", act.Namespace)
	row("state", string(act.State))
	row("type", act.ActivityType)
	row("task queue", act.TaskQueue)
	if act.Node != "" {
		row("node", act.Node)
	}
	row("attempt", fmt.Sprint(act.Attempt))
	writePlacement(row, act.Priority, act.FairnessKey, act.FairnessWeight, act.ConcurrencyKey, act.ScheduleID, act.ScheduleTime)
	if len(act.Payload) > 0 {
		row("input", payloadText(act.Payload))
	}
	if act.State == client.StateCompleted {
		row("result", payloadText(act.Result))
	}
	if act.Failure != nil {
		row("failure", failureText(act.Failure))
	}
	row("scheduled", when(act.ScheduledTime))
	if act.State == client.StateScheduled && act.ReadyTime.After(act.ScheduledTime) {
		row("ready", when(act.ReadyTime))
	}
	row("started", when(act.StartedTime))
	row("closed", when(act.ClosedTime))
	for _, at := range act.Attempts {
		line := fmt.Sprintf("worker %d", at.WorkerID)
		if at.Node != "" {
			line += " on node " + at.Node
		}
		line += ", " + string(at.Outcome)
		if !at.EndedTime.IsZero() && !at.StartedTime.IsZero() {
			line += " after " + at.EndedTime.Sub(at.StartedTime).Round(time.Millisecond).String()
		}
		if at.Failure != nil {
			line += ": " + failureText(at.Failure)
		}
		row(fmt.Sprintf("attempt %d", at.Number), line)
	}
	tw.Flush()
}

func failureText(f *client.ActivityError) string {
	s := f.Error()
	if f.Retryable {
		s += " (retryable)"
	} else {
		s += " (not retryable)"
	}
	return s
}

// payloadText shows a payload as compact JSON, or quoted bytes when it is
// not JSON.
func payloadText(p client.Payload) string {
	if len(p) == 0 {
		return "(empty)"
	}
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Sprintf("%q", string(p))
	}
	return string(b)
}

// writeActivities prints activities as a table.
func writeActivities(w io.Writer, acts []*client.Activity) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tTYPE\tTASK QUEUE\tATTEMPT\tSCHEDULED")
	for _, act := range acts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", act.ID, act.State, act.ActivityType, act.TaskQueue, act.Attempt, when(act.ScheduledTime))
	}
	tw.Flush()
}

func writeNamespace(w io.Writer, ns *client.Namespace) {
	tw := tabwriter.NewWriter(w, 0, 4, 1, ' ', 0)
	fmt.Fprintf(tw, "name:\t%s\n", ns.Name)
	fmt.Fprintf(tw, "origin:\t%s\n", orDash(string(ns.Origin)))
	fmt.Fprintf(tw, "placement:\t%s\n", ns.Placement)
	fmt.Fprintf(tw, "created:\t%s\n", when(ns.CreatedTime))
	fmt.Fprintf(tw, "last seen:\t%s\n", when(ns.LastSeenTime))
	fmt.Fprintf(tw, "retention:\t%s\n", orDash(ns.Retention.String()))
	tw.Flush()
}

func writeNamespaces(w io.Writer, nss []*client.Namespace) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tORIGIN\tPLACEMENT\tCREATED")
	for _, ns := range nss {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", ns.Name, orDash(string(ns.Origin)), ns.Placement, when(ns.CreatedTime))
	}
	tw.Flush()
}
