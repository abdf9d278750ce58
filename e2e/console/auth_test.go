package console

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aion-run/aion/internal/auth"
	"github.com/aion-run/aion/internal/server"
	"github.com/chromedp/chromedp"
)

// TestConsoleAsksForAToken runs the console against a server with API
// keys: the page itself loads without one, says that the data needs a
// token, and with the operator's key goes live, the event stream included.
func TestConsoleAsksForAToken(t *testing.T) {
	const secret = "console-admin-secret"
	srv := startServer(t, func(c *server.Config) {
		c.Auth.Mode = "token"
		c.Auth.Keys = []auth.APIKey{{Name: "ops", SHA256: auth.HashSecret(secret), Namespaces: []string{"*"}, Roles: []auth.Role{auth.RoleAdmin}}}
	})
	p := openBrowser(t, srv.HTTPAddr())
	p.open("/")
	p.waitFor("refusal shown", `document.getElementById("conn").dataset.state === "unauthorized"`, 10*time.Second)
	p.waitFor("token form", visible("#auth"), 5*time.Second)
	if got := p.text("#auth-msg"); got != "This server needs a token." {
		t.Errorf("auth message = %q", got)
	}

	if err := p.do(5*time.Second,
		chromedp.SendKeys(chromedp.CSS("#auth-token"), secret),
		chromedp.Click(chromedp.CSS(`#auth button[type="submit"]`)),
	); err != nil {
		t.Fatalf("enter token: %v", err)
	}
	p.waitFor("live with the token", `document.getElementById("conn").dataset.state === "live"`, 10*time.Second)
	if must[bool](p, visible("#auth")) {
		t.Error("token form still shown after a good token")
	}
	if !must[bool](p, visible("#auth-forget")) {
		t.Error("no way to forget the token")
	}
	sendJSONAs(t, secret, http.MethodPost, "http://"+srv.HTTPAddr()+"/api/v1/namespaces", `{"name":"guarded"}`)
	p.waitFor("namespace from the stream", exists(`#namespaces-body tr[data-namespace="guarded"]`), 10*time.Second)
	p.waitFor("activities listed with the token", `document.getElementById("act-status").textContent.startsWith("updated")`, 10*time.Second)

	// The only page errors are the refused requests before the token.
	for _, e := range p.pageErrors() {
		if !strings.Contains(e, "401") {
			t.Errorf("page error: %s", e)
		}
	}
}
