// Package cli is the aion command line: the server (`aion server`,
// `aion dev`), a demo worker, and client commands for activities and
// namespaces. cmd/aion is a thin main around Execute.
//
// Every flag that has an environment variable says so in its help. The
// order of precedence is: a flag given on the command line, then the
// environment variable, then the default.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/aion-run/aion/client"
)

// Exit codes.
const (
	exitOK = 0
	// exitError: a usage error, a refused or failed call.
	exitError = 1
	// exitNotCompleted: the activity waited for ended failed, canceled or
	// timed out.
	exitNotCompleted = 2
	// exitStaleTarget: an intervention was not sent because no live worker
	// runs the targeted attempt.
	exitStaleTarget = 3
	// exitCapabilityNotSupported: an intervention was not sent because the
	// worker running the attempt did not advertise its capability.
	exitCapabilityNotSupported = 4
)

// Execute runs the aion command line with the process's arguments and
// environment and returns the exit code.
func Execute() int {
	return run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.LookupEnv)
}

// exitError carries a specific exit code out of a command.
type codeError struct {
	code int
	err  error
}

func (e *codeError) Error() string { return e.err.Error() }
func (e *codeError) Unwrap() error { return e.err }

// app is one invocation: its streams, its environment and the global flags.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	lookupEnv      func(string) (string, bool)

	address   string
	token     string
	output    string
	timeout   time.Duration
	logLevel  string
	logFormat string
	tlsCA     string

	// dialClient connects the client commands; tests replace it.
	dialClient func(ctx context.Context) (*client.Client, error)
	// runServer runs `aion server` and `aion dev`; tests replace it.
	runServer serverRunner
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	return newApp(stdin, stdout, stderr, lookupEnv).execute(ctx, args)
}

// execute runs one command line and returns the exit code.
func (a *app) execute(ctx context.Context, args []string) int {
	stderr := a.stderr
	root := a.rootCommand()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ce *codeError
	if errors.As(err, &ce) {
		if ce.err != nil {
			fmt.Fprintln(stderr, "aion:", ce.err)
		}
		return ce.code
	}
	fmt.Fprintln(stderr, "aion:", describe(err))
	return exitError
}

func newApp(stdin io.Reader, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) *app {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr, lookupEnv: lookupEnv}
	a.dialClient = func(ctx context.Context) (*client.Client, error) {
		var opts []client.Option
		if a.token != "" {
			opts = append(opts, client.WithToken(a.token))
		}
		creds, err := a.transport()
		if err != nil {
			return nil, err
		}
		if creds != nil {
			opts = append(opts, client.WithDialOptions(grpc.WithTransportCredentials(creds)))
		}
		return client.Dial(ctx, a.address, opts...)
	}
	a.runServer = defaultServerRunner
	return a
}

// describe renders an error for the terminal: the SDK's context, the
// server's message, and the gRPC code.
func describe(err error) string {
	s, ok := status.FromError(err)
	if !ok || s.Code() == codes.OK {
		return err.Error()
	}
	msg := strings.TrimPrefix(err.Error(), "aion client: ")
	msg = strings.Replace(msg, fmt.Sprintf("rpc error: code = %s desc = ", s.Code()), "", 1)
	return fmt.Sprintf("%s (%s)", msg, s.Code())
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "aion",
		Short: "aion durably schedules activities and pushes each to one eligible worker",
		Long: `aion durably schedules activities (units of side-effecting work) and pushes
each one to exactly one eligible worker over a long-lived gRPC stream.

Start a developer server, a demo worker, and schedule some work:

  aion dev
  aion worker demo --namespace demo --task-queue default
  aion activity schedule --namespace demo --type echo --input '{"hello":"world"}' --wait

Flags take precedence over environment variables, which take precedence over
defaults.`,
		Example: `  aion dev
  aion worker demo --namespace demo --task-queue default
  aion activity schedule --namespace demo --type echo --input '{"hello":"world"}' --wait
  AION_ADDRESS=aion.internal:50051 aion namespace list --output json`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnv(cmd.Flags(), a.lookupEnv); err != nil {
				return err
			}
			switch a.output {
			case "text", "json":
			default:
				return fmt.Errorf("--output %q: want text or json", a.output)
			}
			if _, err := parseLevel(a.logLevel); err != nil {
				return err
			}
			if a.logFormat != "text" && a.logFormat != "json" {
				return fmt.Errorf("--log-format %q: want text or json", a.logFormat)
			}
			return nil
		},
	}
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.CompletionOptions.DisableDefaultCmd = true

	pf := root.PersistentFlags()
	pf.StringVar(&a.address, "address", "127.0.0.1:50051", "address of the aion server's gRPC endpoint (host:port), or of a cluster's servers as host:port,host:port,…")
	bindEnv(pf, "address", "AION_ADDRESS")
	pf.StringVar(&a.token, "token", "", "bearer token sent as \"authorization: Bearer <token>\"")
	bindEnv(pf, "token", "AION_TOKEN")
	pf.StringVar(&a.tlsCA, "tls-ca", "", "PEM file of the CA that signed the server's certificate; set it to connect over TLS")
	bindEnv(pf, "tls-ca", "AION_TLS_CA")
	pf.StringVarP(&a.output, "output", "o", "text", "output format: text or json")
	bindEnv(pf, "output", "AION_OUTPUT")
	pf.DurationVar(&a.timeout, "timeout", 10*time.Second, "deadline of each unary call to the server")
	bindEnv(pf, "timeout", "AION_TIMEOUT")
	pf.StringVar(&a.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	bindEnv(pf, "log-level", "AION_LOG_LEVEL")
	pf.StringVar(&a.logFormat, "log-format", "text", "log format: text or json (one JSON object a line)")
	bindEnv(pf, "log-format", "AION_LOG_FORMAT")

	root.AddCommand(
		a.serverCommand(false),
		a.serverCommand(true),
		a.workerCommand(),
		a.activityCommand(),
		a.workflowCommand(),
		a.scheduleCmd(),
		a.namespaceCommand(),
		a.benchCommand(),
		a.workersCommand(),
		a.eventsCommand(),
		a.tokenCommand(),
		a.attackCommand(),
	)
	return root
}

// envAnnotation marks a flag with the environment variable that sets it.
const envAnnotation = "aion_env"

// bindEnv records that the environment variable env sets flag name when the
// flag is not given, and says so in the flag's help.
func bindEnv(fs *pflag.FlagSet, name, env string) {
	f := fs.Lookup(name)
	if f == nil {
		panic("cli: bindEnv: no flag " + name)
	}
	f.Usage += " (env " + env + ")"
	if err := fs.SetAnnotation(name, envAnnotation, []string{env}); err != nil {
		panic(err)
	}
}

// applyEnv sets every flag that was not given on the command line from its
// environment variable, if that is set.
func applyEnv(fs *pflag.FlagSet, lookupEnv func(string) (string, bool)) error {
	var errs []error
	fs.VisitAll(func(f *pflag.Flag) {
		envs := f.Annotations[envAnnotation]
		if f.Changed || len(envs) == 0 {
			return
		}
		v, ok := lookupEnv(envs[0])
		if !ok {
			return
		}
		if err := f.Value.Set(v); err != nil {
			errs = append(errs, fmt.Errorf("environment variable %s=%q (for --%s): %v", envs[0], v, f.Name, err))
		}
	})
	return errors.Join(errs...)
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// transport returns TLS credentials when --tls-ca is set, else nil (plain).
func (a *app) transport() (credentials.TransportCredentials, error) {
	if a.tlsCA == "" {
		return nil, nil
	}
	creds, err := credentials.NewClientTLSFromFile(a.tlsCA, "")
	if err != nil {
		return nil, fmt.Errorf("--tls-ca: %w", err)
	}
	return creds, nil
}

// logger is the process logger: text on stderr at the chosen level.
func (a *app) logger() *slog.Logger {
	l, _ := parseLevel(a.logLevel)
	opts := &slog.HandlerOptions{Level: l}
	if a.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(a.stderr, opts))
	}
	return slog.New(slog.NewTextHandler(a.stderr, opts))
}

// unary returns a context bounded by --timeout for one call.
func (a *app) unary(ctx context.Context) (context.Context, context.CancelFunc) {
	if a.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, a.timeout)
}

// withClient dials, runs fn, and closes.
func (a *app) withClient(ctx context.Context, fn func(*client.Client) error) error {
	c, err := a.dialClient(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(c)
}
