package main

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	recs, err := parse(strings.NewReader("scenario\tperiod_ms\tfinal_pct\testimate_pct\nstreaming\t20\t-1.5\t2\nchunks16\t100\t3\t-4.25\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []record{{"streaming", 20, -1.5, 2}, {"chunks16", 100, 3, -4.25}}
	if len(recs) != len(want) {
		t.Fatalf("got %v, want %v", recs, want)
	}
	for i := range want {
		if recs[i] != want[i] {
			t.Fatalf("record %d = %v, want %v", i, recs[i], want[i])
		}
	}
	for _, bad := range []string{"a\t1\t2\n", "a\tx\t1\t2\n", "a\t1\tnan?\t2\n"} {
		if _, err := parse(strings.NewReader(bad)); !errors.Is(err, errBadLine) {
			t.Errorf("parse(%q) error %v, want errBadLine", bad, err)
		}
	}
}

// The CDF is a staircase of |x| that reaches 1, clipped at the maximum.
func TestCDF(t *testing.T) {
	pts := cdf([]float64{-2, 1, 3, 50}, 10)
	last := pts[len(pts)-1]
	if last.X != 10 || last.Y != 0.75 {
		t.Fatalf("last point %v, want (10, 0.75): one of four values is past the maximum", last)
	}
	for i := 1; i < len(pts); i++ {
		if pts[i].X < pts[i-1].X || pts[i].Y < pts[i-1].Y {
			t.Fatalf("not monotone at %d: %v", i, pts)
		}
	}
	// Half the values are at most 2.
	for _, p := range pts {
		if p.X == 2 && p.Y == 0.5 {
			return
		}
	}
	t.Fatalf("no step to 0.5 at |x| = 2: %v", pts)
}

func TestDrawNeedsData(t *testing.T) {
	if _, err := drawCDFs([]record{{"a", 20, 1, 1}}, []string{"b"}, 20); err == nil {
		t.Fatal("drew a picture of no scenario")
	}
	if _, err := drawCDFs([]record{{"a", 20, 1, 1}, {"a", 50, -3, 2}}, []string{"a"}, 20); err != nil {
		t.Fatal(err)
	}
}

func TestParseAgent(t *testing.T) {
	recs, err := parseAgent(strings.NewReader("scenario\terr_pct\nsm\t-1.5\nmembound\t3\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || recs[0] != (agentRecord{"sm", -1.5}) || recs[1] != (agentRecord{"membound", 3}) {
		t.Fatalf("got %v", recs)
	}
	for _, bad := range []string{"a\t1\t2\n", "a\tx\n"} {
		if _, err := parseAgent(strings.NewReader(bad)); !errors.Is(err, errBadLine) {
			t.Errorf("parseAgent(%q) error %v, want errBadLine", bad, err)
		}
	}
	if _, err := drawAgent([]agentPanel{{title: "x"}}, 20); err == nil {
		t.Fatal("drew a panel of no data")
	}
	if _, err := drawAgent([]agentPanel{{title: "x", recs: recs}}, 20); err != nil {
		t.Fatal(err)
	}
}
