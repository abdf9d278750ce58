package cli

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/aion-run/aion/internal/auth"
)

func (a *app) tokenCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Make API keys for --auth token",
		Long: `token makes API keys. The server stores only the SHA-256 of each key, in
[[tokens]] tables of its config file; callers present the key itself with
--token or AION_TOKEN.`,
		Example: `  aion token new --name tenant-a-worker --namespaces tenant-a --roles worker
  echo -n "$SECRET" | aion token hash`,
	}
	var name, namespaces, roles string
	newCmd := &cobra.Command{
		Use:   "new",
		Short: "Generate a random API key and print it with its [[tokens]] entry",
		Long: `new prints a fresh random key (give it to the caller; it is not stored
anywhere) and the [[tokens]] table to paste into the server's config file.`,
		Example: `  aion token new --name tenant-a-worker --namespaces tenant-a --roles worker
  aion token new --name ops --namespaces '*' --roles admin
  aion token new --name prometheus --namespaces '*' --roles reader`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if name == "" {
				return fmt.Errorf("--name: required")
			}
			var rs []string
			for _, r := range strings.Split(roles, ",") {
				role, err := auth.ParseRole(strings.TrimSpace(r))
				if err != nil {
					return fmt.Errorf("--roles: %w", err)
				}
				rs = append(rs, fmt.Sprintf("%q", role))
			}
			var nss []string
			for _, ns := range strings.Split(namespaces, ",") {
				if ns = strings.TrimSpace(ns); ns == "" {
					return fmt.Errorf("--namespaces %q: empty name in the list", namespaces)
				}
				nss = append(nss, fmt.Sprintf("%q", ns))
			}
			var b [32]byte
			if _, err := rand.Read(b[:]); err != nil {
				return err
			}
			secret := "aion_" + base64.RawURLEncoding.EncodeToString(b[:])
			fmt.Fprintf(a.stdout, "key (give it to %s; it is shown once): %s\n\n", name, secret)
			fmt.Fprintf(a.stdout, "[[tokens]]\nname = %q\nsha256 = %q\nnamespaces = [%s]\nroles = [%s]\n",
				name, auth.HashSecret(secret), strings.Join(nss, ", "), strings.Join(rs, ", "))
			return nil
		},
	}
	newCmd.Flags().StringVar(&name, "name", "", "who the key is for (shown in logs and errors)")
	newCmd.Flags().StringVar(&namespaces, "namespaces", "", "comma-separated namespaces the key grants, or '*' for all")
	newCmd.Flags().StringVar(&roles, "roles", "client", "comma-separated roles: worker, client, reader (read-only), admin")
	hashCmd := &cobra.Command{
		Use:     "hash",
		Short:   "Print the SHA-256 of a key read from standard input",
		Long:    `hash reads one key from standard input and prints the hash the server's config file stores.`,
		Example: `  echo -n "$SECRET" | aion token hash`,
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			line, err := bufio.NewReader(a.stdin).ReadString('\n')
			secret := strings.TrimRight(line, "\r\n")
			if secret == "" {
				if err != nil {
					return fmt.Errorf("read the key from standard input: %w", err)
				}
				return fmt.Errorf("standard input: empty key")
			}
			fmt.Fprintln(a.stdout, auth.HashSecret(secret))
			return nil
		},
	}
	cmd.AddCommand(newCmd, hashCmd)
	return cmd
}
