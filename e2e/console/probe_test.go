package console

import (
	"testing"
	"time"
)

func TestProbe(t *testing.T) {
	srv := startServer(t)
	connectFleet(t, srv.GRPCAddr(), 1000, 50)
	p := openBrowser(t, srv.HTTPAddr())
	for range 3 {
		p.open("/")
		p.waitFor("first render", `typeof window.aionFirstRenderMs === "number"`, 20*time.Second)
		t.Log(must[string](p, `JSON.stringify({nav: (({requestStart, responseEnd, domInteractive, domContentLoadedEventEnd, loadEventEnd}) => ({requestStart, responseEnd, domInteractive, domContentLoadedEventEnd, loadEventEnd}))(performance.getEntriesByType("navigation")[0].toJSON()), marks: performance.getEntriesByType("mark").map(m => [m.name, Math.round(m.startTime)]), res: performance.getEntriesByType("resource").map(r => [r.name.split("/").pop(), Math.round(r.startTime), Math.round(r.responseStart), Math.round(r.responseEnd)])})`))
	}
}
