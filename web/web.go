// Package web is aion's ops console: plain HTML, CSS and JavaScript modules,
// embedded in the binary and served by the HTTP side. There is no build
// step: the files under static/ are what the browser runs.
package web

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Files returns the console's files: index.html at the root and the
// stylesheet and scripts under assets/.
func Files() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the directory is embedded above; this cannot fail
	}
	return sub
}

// Mount routes the console on mux: the page at exactly "/" and its files
// under "/assets/".
//
// It registers those two patterns rather than a catch-all "GET /": a
// catch-all would conflict with method-less patterns on the same mux (the
// server's /debug/pprof/ routes make ServeMux panic at registration), and it
// would turn the API's 404 and 405 answers for unknown paths and wrong
// methods into console responses.
func Mount(mux *http.ServeMux) {
	files := Files()
	assets := http.FileServerFS(files)
	mux.Handle("GET /{$}", headers(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, files, "index.html")
	})))
	mux.Handle("GET /assets/", headers(assets))
}

// headers sets what every console response carries: no caching across
// binary upgrades (embedded files have no modification time) and a strict
// content security policy, since the page only talks to its own origin.
func headers(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy",
			"default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'")
		h.ServeHTTP(w, r)
	})
}
