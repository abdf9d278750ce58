package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/aion-run/aion/internal/auth"
	"github.com/spf13/pflag"
)

// configKeys are the flags a config file may set, under their flag name
// with "-" written as "_".
var configKeys = []string{
	"grpc-addr", "http-addr", "data-dir", "drain-timeout", "heartbeat-window",
	"auto-create", "sqlite-sync", "accept-data-loss", "pprof", "log-level", "log-format",
	"auth", "jwt-secret-file", "jwks-file", "jwt-issuer", "jwt-audience", "token-expiry-grace", "tls-cert", "tls-key", "insecure-allow-no-auth",
	"max-pending-per-namespace", "max-in-flight-per-namespace", "store", "server-name", "lease", "reap-interval", "max-receive-memory", "max-receive-rate",
	"max-namespaces", "max-mint-per-request",
}

// tokenEntry is one [[tokens]] table: an API key stored as a hash.
type tokenEntry struct {
	Name       string   `toml:"name"`
	SHA256     string   `toml:"sha256"`
	Namespaces []string `toml:"namespaces"`
	Roles      []string `toml:"roles"`
}

// applyConfigFile sets every flag that neither the command line nor its
// environment variable set from the TOML file at path, and returns the API
// keys of its [[tokens]] tables. Unknown keys and values that do not parse
// are refused, naming the key.
func applyConfigFile(fs *pflag.FlagSet, path string, lookupEnv func(string) (string, bool)) ([]auth.APIKey, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	var values map[string]any
	if _, err := toml.Decode(string(raw), &values); err != nil {
		return nil, fmt.Errorf("--config %s: %w", path, err)
	}
	var file struct {
		Tokens []tokenEntry `toml:"tokens"`
	}
	if _, err := toml.Decode(string(raw), &file); err != nil {
		return nil, fmt.Errorf("--config %s: tokens: %w", path, err)
	}
	delete(values, "tokens")
	var errs []error
	var keys []auth.APIKey
	for i, t := range file.Tokens {
		k := auth.APIKey{Name: t.Name, SHA256: t.SHA256, Namespaces: t.Namespaces}
		for _, r := range t.Roles {
			role, err := auth.ParseRole(r)
			if err != nil {
				errs = append(errs, fmt.Errorf("--config %s: tokens[%d] (%s).roles: %v", path, i, t.Name, err))
			}
			k.Roles = append(k.Roles, role)
		}
		keys = append(keys, k)
	}
	names := make([]string, 0, len(values))
	for k := range values {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, key := range names {
		name := strings.ReplaceAll(key, "_", "-")
		f := fs.Lookup(name)
		if f == nil || !slices.Contains(configKeys, name) {
			errs = append(errs, fmt.Errorf("--config %s: unknown key %q (known: %s)", path, key, knownKeys()))
			continue
		}
		if f.Changed {
			continue // the command line wins
		}
		if envs := f.Annotations[envAnnotation]; len(envs) > 0 {
			if _, ok := lookupEnv(envs[0]); ok {
				continue // then the environment
			}
		}
		if err := f.Value.Set(fmt.Sprint(values[key])); err != nil {
			errs = append(errs, fmt.Errorf("--config %s: %s = %v: %v", path, key, values[key], err))
		}
	}
	return keys, errors.Join(errs...)
}

func knownKeys() string {
	out := make([]string, len(configKeys))
	for i, k := range configKeys {
		out[i] = strings.ReplaceAll(k, "-", "_")
	}
	return strings.Join(out, ", ") + ", [[tokens]]"
}

// printConfig writes the effective settings as a config file.
func printConfig(w io.Writer, fs *pflag.FlagSet, tokens []auth.APIKey) {
	fmt.Fprintln(w, "# effective aion server settings (flags > environment > config file > defaults)")
	for _, name := range configKeys {
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		key := strings.ReplaceAll(name, "-", "_")
		if t := f.Value.Type(); t == "bool" || t == "int" {
			fmt.Fprintf(w, "%s = %s\n", key, f.Value.String())
		} else {
			fmt.Fprintf(w, "%s = %q\n", key, f.Value.String())
		}
	}
	for _, t := range tokens {
		roles := make([]string, len(t.Roles))
		for i, r := range t.Roles {
			roles[i] = fmt.Sprintf("%q", r)
		}
		nss := make([]string, len(t.Namespaces))
		for i, ns := range t.Namespaces {
			nss[i] = fmt.Sprintf("%q", ns)
		}
		fmt.Fprintf(w, "\n[[tokens]]\nname = %q\nsha256 = %q\nnamespaces = [%s]\nroles = [%s]\n",
			t.Name, t.SHA256, strings.Join(nss, ", "), strings.Join(roles, ", "))
	}
}
