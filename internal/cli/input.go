package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// maxInput bounds what --input reads from a file or stdin.
const maxInput = 64 << 20

// readInput resolves an --input value: inline JSON, @FILE, or - for stdin.
// The result must be valid JSON; the error names the flag. An empty value
// means no payload.
func readInput(flag, value string, stdin io.Reader) ([]byte, error) {
	var (
		data []byte
		from string
	)
	switch {
	case value == "":
		return nil, nil
	case value == "-":
		b, err := io.ReadAll(io.LimitReader(stdin, maxInput+1))
		if err != nil {
			return nil, fmt.Errorf("%s -: read stdin: %w", flag, err)
		}
		data, from = b, "stdin"
	case strings.HasPrefix(value, "@"):
		path := value[1:]
		if path == "" {
			return nil, fmt.Errorf("%s %q: want @FILE with a file name", flag, value)
		}
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", flag, value, err)
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, maxInput+1))
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", flag, value, err)
		}
		data, from = b, "file "+path
	default:
		data, from = []byte(value), "inline value"
	}
	if len(data) > maxInput {
		return nil, fmt.Errorf("%s: %s is larger than %d bytes", flag, from, maxInput)
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return nil, fmt.Errorf("%s: %s is empty; want a JSON document", flag, from)
	}
	if err := checkJSON(data); err != nil {
		return nil, fmt.Errorf("%s: %s is not valid JSON: %v", flag, from, err)
	}
	return data, nil
}

// checkJSON reports why data is not exactly one JSON document.
func checkJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	var v json.RawMessage
	if err := dec.Decode(&v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("unexpected data after the JSON document at offset %d", dec.InputOffset())
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("unexpected data after the JSON document at offset %d", dec.InputOffset())
	}
	return nil
}
