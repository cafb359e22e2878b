package host

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/wasmjobs/wasmjobs/internal/outbound"
)

// parseHTTP is the manifest field of the [http] table: the module's outbound HTTP
// grant (internal/outbound). ${env:NAME} in its headers is read from the host's
// environment now, when the manifest is read: at load and at each reload.
func parseHTTP(m *Manifest, v value) error {
	table, ok := v.v.(map[string]any)
	if !ok {
		return fmt.Errorf(`want a table such as [http] then allow = ["https://api.example.com"], got %s`, v.raw)
	}
	g, err := outbound.ParseGrant(table, os.LookupEnv)
	if err != nil {
		var fe *outbound.FieldError
		if errors.As(err, &fe) {
			// The key path inside [http] names the line: "headers.https://api.example.com.Authorization".
			return &entryError{key: strings.Join(fe.Key, "."), err: fe.Err}
		}
		return err
	}
	m.http = g
	return nil
}
