package source_test

import (
	"testing"

	"github.com/otelenergy/otelenergy/internal/source"
)

// TestShareOf pins the one board-share rule every GPU source applies.
func TestShareOf(t *testing.T) {
	for _, tt := range []struct {
		name string
		l    source.Listing
		want source.Share
	}{
		{"no process", source.Listing{Comparable: true, Measured: true}, source.Share{Split: true, Fraction: 1}},
		{"no process, not comparable", source.Listing{}, source.Share{Split: true, Fraction: 1}},
		{"not comparable", source.Listing{Processes: 1, Mine: 1, Measured: true, UsedAll: 5, UsedMine: 5}, source.Share{Processes: 1, Shared: true}},
		{"only ours", source.Listing{Processes: 2, Mine: 2, Comparable: true}, source.Share{Processes: 2, Split: true, Fraction: 1}},
		{"none ours", source.Listing{Processes: 2, Comparable: true, Measured: true, UsedAll: 9}, source.Share{Processes: 2, Shared: true}},
		{"not measured", source.Listing{Processes: 2, Mine: 1, Comparable: true, UsedAll: 9, UsedMine: 3}, source.Share{Processes: 2, Shared: true}},
		{"nobody used it", source.Listing{Processes: 4, Mine: 1, Comparable: true, Measured: true}, source.Share{Processes: 4, Shared: true, Split: true, Fraction: 0.25}},
		// The case the vendors once disagreed on: no confident zero.
		{"ours idle while others work", source.Listing{Processes: 2, Mine: 1, Comparable: true, Measured: true, UsedAll: 70}, source.Share{Processes: 2, Shared: true}},
		{"by use", source.Listing{Processes: 2, Mine: 1, Comparable: true, Measured: true, UsedAll: 400, UsedMine: 300}, source.Share{Processes: 2, Shared: true, Split: true, Fraction: 0.75}},
		{"ours above all", source.Listing{Processes: 2, Mine: 1, Comparable: true, Measured: true, UsedAll: 4, UsedMine: 9}, source.Share{Processes: 2, Shared: true, Split: true, Fraction: 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := source.ShareOf(tt.l); got != tt.want {
				t.Fatalf("ShareOf(%+v) = %+v, want %+v", tt.l, got, tt.want)
			}
		})
	}
	if u := source.UnknownShare(); u.Processes != -1 || !u.Shared || u.Split {
		t.Fatalf("UnknownShare = %+v", u)
	}
}
