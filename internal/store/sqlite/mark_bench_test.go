package sqlite

import (
	"path/filepath"
	"testing"
)

// BenchmarkMarkAdvance measures what each commit adds outside SQLite: one
// record written into the mark file's page cache.
func BenchmarkMarkAdvance(b *testing.B) {
	m, err := createMark(filepath.Join(b.TempDir(), "aion.db.mark"), newIdentity(), Counters{})
	if err != nil {
		b.Fatal(err)
	}
	defer m.close()
	var c Counters
	for b.Loop() {
		c.Commits++
		c.Writes += 100
		c.Activities += 50
		m.advance(c)
	}
}
