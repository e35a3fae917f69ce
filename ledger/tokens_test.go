package ledger

import (
	"testing"

	"github.com/otelenergy/otelenergy/ring"
)

// TestTokensCountEveryReportOnce follows requests through every way the
// ledger lets one go (refused by Add at the limit, finalized, flushed
// active, flushed from the inbox) and checks that Tokens counts each
// report exactly once: by the ledger while AddOutput and AddInput report
// true, and never after they report false.
func TestTokensCountEveryReportOnce(t *testing.T) {
	rg, err := ring.New(64)
	if err != nil {
		t.Fatal(err)
	}
	l := New(Config{Rings: []*ring.Ring{rg}, MaxActive: 2})
	var counted, refused [2]uint64 // output, input
	add := func(r *Account, out, in uint64) {
		t.Helper()
		if r.AddOutput(out) {
			counted[0] += out
		} else {
			refused[0] += out
		}
		if r.AddInput(in) {
			counted[1] += in
		} else {
			refused[1] += in
		}
	}
	check := func(what string) {
		t.Helper()
		if out, in := l.Tokens(); out != counted[0] || in != counted[1] {
			t.Fatalf("%s: Tokens = %d, %d; counted by the ledger %d, %d", what, out, in, counted[0], counted[1])
		}
	}

	a, b, c := newAccount(0, nil), newAccount(0, nil), newAccount(0, nil)
	l.Add(a)
	l.Add(b)
	l.Add(c) // beyond MaxActive: refused
	if c.Flags()&FlagDropped == 0 {
		t.Fatal("the third request was not refused")
	}
	add(a, 3, 10)
	add(c, 5, 1)
	l.Observe(10, 0, 0)
	check("adopted")
	if refused != [2]uint64{5, 1} {
		t.Fatalf("refused %v, want the refused request's 5, 1", refused)
	}
	add(b, 2, 0)
	a.End(20)
	add(a, 1, 0) // after End, before the ledger lets it go: still counted
	l.Observe(30, 0, 0)
	check("ended")
	l.Flush(nil)
	check("flushed")
	add(a, 2, 2) // after the ledger let it go
	add(b, 4, 0)
	d := newAccount(40, nil)
	add(d, 7, 3) // before Add: the ledger counts it once it has it
	l.Add(d)
	l.Flush(nil) // d is still in the inbox
	check("flushed from the inbox")
	add(d, 1, 1)
	check("after the last flush")
	if got, want := a.Output(), uint64(3+1+2); got != want {
		t.Fatalf("a.Output() = %d, want %d", got, want)
	}
	if got, want := d.Input(), uint64(3+1); got != want {
		t.Fatalf("d.Input() = %d, want %d", got, want)
	}
	if want := [2]uint64{5 + 2 + 4 + 1, 1 + 2 + 1}; refused != want {
		t.Fatalf("refused %v, want %v", refused, want)
	}
}
