package tomlvalue_test

import (
	"testing"

	"github.com/wasmjobs/wasmjobs/internal/tomlvalue"
)

func TestDescribe(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v    any
		want string
	}{
		{"yes", `"yes"`},
		{"a\nb", `"a\nb"`},
		{int64(5), "5"},
		{1.5, "1.5"},
		{true, "true"},
		{[]any{"a"}, "an array"},
		{map[string]any{"k": "v"}, "a table"},
	} {
		if got := tomlvalue.Describe(tc.v); got != tc.want {
			t.Errorf("Describe(%#v) = %s, want %s", tc.v, got, tc.want)
		}
	}
}
