// Command aion is the aion server, developer server, demo worker and client
// command line. See `aion --help`.
package main

import (
	"os"

	"github.com/aion-run/aion/internal/cli"
)

func main() {
	os.Exit(cli.Execute())
}
