package aiontest_test

import (
	"fmt"
	"slices"
	"testing"
)

// exampleT stands in, in the runnable examples, for the *testing.T a test
// passes to aiontest: a failure panics, and cleanup runs what the test
// would run when it ends.
type exampleT struct {
	testing.TB // not called: the methods below are all aiontest uses
	cleanups   []func()
}

func (*exampleT) Helper() {}

func (*exampleT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

func (t *exampleT) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }

func (t *exampleT) cleanup() {
	for _, f := range slices.Backward(t.cleanups) {
		f()
	}
}
