package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/spf13/pflag"
)

// configKeys are the flags a config file may set, under their flag name
// with "-" written as "_".
var configKeys = []string{
	"grpc-addr", "http-addr", "data-dir", "drain-timeout", "heartbeat-window",
	"auto-create", "sqlite-sync", "pprof", "log-level", "log-format",
}

// applyConfigFile sets every flag that neither the command line nor its
// environment variable set from the TOML file at path. Unknown keys and
// values that do not parse are refused, naming the key.
func applyConfigFile(fs *pflag.FlagSet, path string, lookupEnv func(string) (string, bool)) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	var values map[string]any
	md, err := toml.Decode(string(raw), &values)
	if err != nil {
		return fmt.Errorf("--config %s: %w", path, err)
	}
	_ = md
	var errs []error
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, key := range keys {
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
	return errors.Join(errs...)
}

func knownKeys() string {
	out := make([]string, len(configKeys))
	for i, k := range configKeys {
		out[i] = strings.ReplaceAll(k, "-", "_")
	}
	return strings.Join(out, ", ")
}

// printConfig writes the effective settings as a config file.
func printConfig(w io.Writer, fs *pflag.FlagSet) {
	fmt.Fprintln(w, "# effective aion server settings (flags > environment > config file > defaults)")
	for _, name := range configKeys {
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		key := strings.ReplaceAll(name, "-", "_")
		if f.Value.Type() == "bool" {
			fmt.Fprintf(w, "%s = %s\n", key, f.Value.String())
		} else {
			fmt.Fprintf(w, "%s = %q\n", key, f.Value.String())
		}
	}
}
