// Package tomlvalue names decoded TOML values in the messages of the manifest's
// checks, so that every table of a manifest ([http] as much as the rest) says "got 5",
// "got an array" or "got a table" alike.
package tomlvalue

import (
	"fmt"
	"strconv"
)

// Describe names a decoded TOML value (go-toml/v2 into any: a string, an int64, a
// float64, a bool, a date or time, []any, map[string]any) for a message: a string
// quoted, an array or a table by its kind, anything else as it prints.
func Describe(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	default:
		return fmt.Sprint(x)
	}
}
