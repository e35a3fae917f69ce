package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The documented commands, and how TestDocs runs them.
//
// Every shell block of README.md and docs/*.md (a fence tagged sh, bash,
// shell or console, or an untagged one whose first line is a "$ "
// prompt) has a marker: an HTML comment just before its fence, which
// renders as nothing, beginning with "docrun":
//
//	<!-- docrun
//	1 bg
//	1 ready-cmd: curl -s http://127.0.0.1:8089/readyz => ^ready
//	2 expect: (?im)^energy-millijoules: \d+
//	-->
//
// Without a directive the block's commands run in order and each must
// exit 0. A block's commands are its lines, with "\" continuations joined
// and comment lines dropped; in a transcript, the lines after a "$ "
// prompt. Directives, one a line, apply to the block or, after a number,
// to its Nth command:
//
//	skip: KIND REASON         not run: KIND is gpu, docker, cluster,
//	                          network, ci, long or placeholder
//	needs: jaeger|prometheus3 a backend the e2e module builds; with
//	                          OTELENERGY_DOCS_NO_BACKENDS set the block
//	                          is not run
//	file: NAME                the block is a file to write (to NAME,
//	                          under the repository's root, removed after)
//	setup: SHELL              a command run first, hidden from the reader
//	                          (say in the text what it stands for)
//	setup-bg: SHELL => READY => RE   the same, in the background, until
//	                          READY's output matches RE
//	N skip: KIND REASON
//	N bg                      run in the background, as in a terminal of
//	                          its own; a command ending in & is one too
//	N ready-cmd: SHELL => RE  the next command waits until SHELL's
//	                          output matches RE (for a background one)
//	N until: RE               interrupt it (SIGINT to its process group)
//	                          once its output matches RE
//	N until-cmd: SHELL => RE  interrupt it once SHELL's output matches RE
//	N expect: RE              its output (stdout and stderr) matches RE
//	N count: K RE             RE matches at least K times
//	N range: KEY LO HI        the median of the numbers after KEY= is in
//	                          [LO, HI]
//	N exit: CODE ...          its exit status, one of these (default 0;
//	                          after an interrupt, 0 or 1 for go run,
//	                          which, interrupted as by Ctrl-C in a
//	                          terminal, exits 1 when one of its idle
//	                          build workers sees the signal, a race)
//	N timeout: DURATION       default 3m
//
// "kill %N ..." stops background jobs, numbered as bash numbers them in
// one shell per document. In a regular expression ${HEAD} is the
// checkout's commit, its first 12 hex digits, and ${REVISION} what
// -version says of it (see revisionRE). Commands run with bash in
// the repository's root, with no OTEL_* or OTELENERGY_* variable but
// their own, otelenergy-agent and otelenergy-proxy on PATH (built as
// README.md builds them) and, with needs: prometheus3, prometheus.
//
// An inline command in the text (`go run ./example/app -duration 15s`)
// is covered when a marked block runs the same command; one that is not
// is declared with its reason, anywhere in its document:
//
//	<!-- docrun inline gpu: otelenergy-proxy -backend http://127.0.0.1:8000 -devices 0 -->

// docSkipKinds are the reasons a documented command may not run.
var docSkipKinds = []string{"gpu", "docker", "cluster", "network", "ci", "long", "placeholder"}

// docDoc is one document's shell blocks and inline commands.
type docDoc struct {
	path    string // relative to the repository's root
	blocks  []*docBlock
	inline  []docInline // commands in the text
	declare []docInline // inline commands declared not run, with their kind
}

// docBlock is one fenced shell block and its marker.
type docBlock struct {
	doc   string
	line  int // the fence's line
	lang  string
	body  string // the block's text
	cmds  []docCmd
	mark  *docMarker // nil when unmarked
	kind  string     // "sh" or "transcript"
	where string     // doc:line
}

// docCmd is one command of a block.
type docCmd struct {
	line int    // its first line in the document
	text string // as written, continuations joined
	code string // what runs: the text without a trailing comment and &
	bg   bool   // it ends with &
	kill []int  // a "kill %N" line: the jobs it stops
}

// docInline is a command in a document's text, or a declaration of one.
type docInline struct {
	line       int
	text, kind string
}

// docMarker is a parsed docrun marker.
type docMarker struct {
	line     int
	skip     *docSkip
	needs    []string
	file     string
	setup    []string
	setupBg  []docPoll // the command, and its readiness
	per      map[int]*docSpec
	problems []string
}

// docSkip says why something is not run.
type docSkip struct{ kind, reason string }

// docPoll is a command and the output that means it is ready.
type docPoll struct {
	run, shell string
	re         *regexp.Regexp
}

// docSpec is what one command of a block is run with.
type docSpec struct {
	skip    *docSkip
	bg      bool
	ready   *docPoll
	until   *regexp.Regexp
	untilC  *docPoll
	expect  []*regexp.Regexp
	counts  []docCount
	ranges  []docRange
	exit    []int // nil: 0
	timeout time.Duration
}

type docCount struct {
	n  int
	re *regexp.Regexp
}

type docRange struct {
	key    string
	lo, hi float64
}

var (
	fenceLine  = regexp.MustCompile("^(\\s*)```\\s*([A-Za-z0-9_-]*)\\s*$")
	inlineCode = regexp.MustCompile("`([^`\n]+)`")
	inlineDecl = regexp.MustCompile(`<!--\s*docrun\s+inline\s+([a-z]+):\s*(.+?)\s*-->`)
	killLine   = regexp.MustCompile(`^kill((?:\s+%\d+)+)\s*$`)
	// commandLike matches an inline command: a program of these
	// documents, with arguments or variables before it (a name alone,
	// `otelenergy-agent`, names it), or a script.
	commandLike = regexp.MustCompile(`^(?:[A-Z][A-Z0-9_]*=\S*\s+)+(?:otelenergy-agent|otelenergy-proxy)$|` +
		`^(?:[A-Z][A-Z0-9_]*=\S*\s+)*(?:go (?:run|test|build|install|tool)|otelenergy-agent|otelenergy-proxy|bin/otelenergy-\S+|curl|cd|docker|kubectl|nvidia-smi)\s|` +
		`^(?:\./scripts/|\.ci/)\S+`)
)

// loadDocs parses README.md and docs/*.md under root.
func loadDocs(root string) ([]*docDoc, error) {
	paths := []string{"README.md"}
	md, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	for _, p := range md {
		rel, _ := filepath.Rel(root, p)
		paths = append(paths, rel)
	}
	var docs []*docDoc
	for _, p := range paths {
		d, err := parseDoc(root, p)
		if err != nil {
			return nil, err
		}
		docs = append(docs, d)
	}
	return docs, nil
}

// parseDoc parses one document.
func parseDoc(root, rel string) (*docDoc, error) {
	f, err := os.Open(filepath.Join(root, rel))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	d := &docDoc{path: filepath.ToSlash(rel)}
	var pending *docMarker // the last marker, until a fence or text comes
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		for _, m := range inlineDecl.FindAllStringSubmatch(l, -1) {
			d.declare = append(d.declare, docInline{line: i + 1, kind: m[1], text: normalize(m[2])})
		}
		if strings.Contains(l, "<!--") && strings.Contains(l, "docrun") && !inlineDecl.MatchString(l) {
			// A marker, possibly over several lines.
			var body []string
			start := i
			text := l[strings.Index(l, "docrun")+len("docrun"):]
			for !strings.Contains(text, "-->") && i+1 < len(lines) {
				body = append(body, text)
				i++
				text = lines[i]
			}
			body = append(body, text[:strings.Index(text, "-->")])
			pending = parseMarker(start+1, body)
			continue
		}
		m := fenceLine.FindStringSubmatch(l)
		if m == nil {
			if strings.TrimSpace(l) != "" {
				pending = nil // a marker stands right before its fence
				for _, c := range inlineCode.FindAllStringSubmatch(l, -1) {
					if commandLike.MatchString(c[1]) {
						d.inline = append(d.inline, docInline{line: i + 1, text: normalize(c[1])})
					}
				}
			}
			continue
		}
		indent, lang := m[1], m[2]
		var body []string
		j := i + 1
		for ; j < len(lines) && strings.TrimSpace(lines[j]) != "```"; j++ {
			body = append(body, strings.TrimPrefix(lines[j], indent))
		}
		b := &docBlock{doc: d.path, line: i + 1, lang: lang, body: strings.Join(body, "\n") + "\n", mark: pending,
			where: fmt.Sprintf("%s:%d", d.path, i+1)}
		pending = nil
		switch {
		case b.mark != nil && b.mark.file != "":
			b.kind = "file"
		case slices.Contains([]string{"sh", "bash", "shell", "console"}, lang):
			b.kind = "sh"
			b.cmds = splitCommands(body, i+2)
		case lang == "" && len(body) > 0 && strings.HasPrefix(strings.TrimSpace(firstNonBlank(body)), "$ "):
			b.kind = "transcript"
			b.cmds = transcriptCommands(body, i+2)
		}
		if b.kind != "" {
			d.blocks = append(d.blocks, b)
		}
		i = j
	}
	return d, nil
}

func firstNonBlank(ls []string) string {
	for _, l := range ls {
		if strings.TrimSpace(l) != "" {
			return l
		}
	}
	return ""
}

// normalize joins a command's continued lines and collapses its white
// space, so that an inline command and a block's compare equal.
func normalize(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\\\n", " ")), " ")
}

// splitCommands splits a shell block into commands: continuations
// joined, blank and comment lines dropped.
func splitCommands(body []string, first int) []docCmd {
	var cmds []docCmd
	for i := 0; i < len(body); i++ {
		l := body[i]
		if t := strings.TrimSpace(l); t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		start := i
		text := l
		for strings.HasSuffix(strings.TrimRight(text, " "), "\\") && i+1 < len(body) {
			i++
			text = strings.TrimRight(text, " ") + "\n" + body[i] // bash joins the lines
		}
		cmds = append(cmds, newCommand(first+start, text))
	}
	return cmds
}

// transcriptCommands takes the "$ " lines of a transcript, with their
// continuations; the other lines are the output shown.
func transcriptCommands(body []string, first int) []docCmd {
	var cmds []docCmd
	for i := 0; i < len(body); i++ {
		l := strings.TrimSpace(body[i])
		if !strings.HasPrefix(l, "$ ") {
			continue
		}
		start := i
		text := strings.TrimPrefix(l, "$ ")
		for strings.HasSuffix(text, "\\") && i+1 < len(body) {
			i++
			text += "\n" + body[i] // bash joins the lines
		}
		cmds = append(cmds, newCommand(first+start, text))
	}
	return cmds
}

// newCommand makes a command from its text: its code is the text without
// a trailing comment, and a trailing & makes it a background job.
func newCommand(line int, text string) docCmd {
	c := docCmd{line: line, text: text}
	code := strings.TrimSpace(stripComment(text))
	if m := killLine.FindStringSubmatch(code); m != nil {
		for _, f := range strings.Fields(m[1]) {
			n, _ := strconv.Atoi(strings.TrimPrefix(f, "%"))
			c.kill = append(c.kill, n)
		}
	}
	if strings.HasSuffix(code, "&") && !strings.HasSuffix(code, "&&") {
		c.bg = true
		code = strings.TrimSpace(strings.TrimSuffix(code, "&"))
	}
	c.code = code
	return c
}

// stripComment removes a trailing shell comment: a # outside quotes, at
// the start or after white space, to the end of its line.
func stripComment(s string) string {
	var out strings.Builder
	inSingle, inDouble := false, false
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == '\\' && !inSingle && i+1 < len(s):
			out.WriteByte(ch)
			i++
			ch = s[i]
		case ch == '\'' && !inDouble:
			inSingle = !inSingle
		case ch == '"' && !inSingle:
			inDouble = !inDouble
		case ch == '#' && !inSingle && !inDouble && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t'):
			for i < len(s) && s[i] != '\n' {
				i++
			}
			if i < len(s) {
				out.WriteByte('\n')
			}
			continue
		}
		out.WriteByte(ch)
	}
	return out.String()
}

// parseMarker parses a marker's lines.
func parseMarker(line int, body []string) *docMarker {
	mk := &docMarker{line: line, per: map[int]*docSpec{}}
	bad := func(format string, a ...any) { mk.problems = append(mk.problems, fmt.Sprintf(format, a...)) }
	for _, raw := range body {
		l := strings.TrimSpace(raw)
		if l == "" {
			continue
		}
		n := 0
		if k := strings.IndexByte(l, ' '); k > 0 {
			if v, err := strconv.Atoi(l[:k]); err == nil {
				n, l = v, strings.TrimSpace(l[k+1:])
			}
		}
		key, val, _ := strings.Cut(l, ":")
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		if n == 0 {
			switch key {
			case "skip":
				if mk.skip = parseSkip(val); mk.skip == nil {
					bad("skip %q: want a kind of %v and a reason", val, docSkipKinds)
				}
			case "needs":
				mk.needs = append(mk.needs, strings.Fields(strings.ReplaceAll(val, ",", " "))...)
			case "file":
				mk.file = val
			case "setup":
				mk.setup = append(mk.setup, val)
			case "setup-bg":
				parts := strings.Split(val, " => ")
				if len(parts) != 3 {
					bad("setup-bg %q: want SHELL => READY => RE", val)
					continue
				}
				re, err := compileDocRE(parts[2])
				if err != nil {
					bad("setup-bg: %v", err)
					continue
				}
				mk.setupBg = append(mk.setupBg, docPoll{run: parts[0], shell: parts[1], re: re})
			default:
				bad("unknown directive %q", l)
			}
			continue
		}
		sp := mk.per[n]
		if sp == nil {
			sp = &docSpec{}
			mk.per[n] = sp
		}
		switch key {
		case "skip":
			if sp.skip = parseSkip(val); sp.skip == nil {
				bad("%d skip %q: want a kind of %v and a reason", n, val, docSkipKinds)
			}
		case "bg":
			sp.bg = true
		case "ready-cmd", "until-cmd":
			shell, pat, ok := strings.Cut(val, " => ")
			re, err := compileDocRE(pat)
			if !ok || err != nil {
				bad("%d %s %q: want SHELL => RE (%v)", n, key, val, err)
				continue
			}
			if key == "ready-cmd" {
				sp.ready = &docPoll{shell: shell, re: re}
			} else {
				sp.untilC = &docPoll{shell: shell, re: re}
			}
		case "until", "expect":
			re, err := compileDocRE(val)
			if err != nil {
				bad("%d %s: %v", n, key, err)
				continue
			}
			if key == "until" {
				sp.until = re
			} else {
				sp.expect = append(sp.expect, re)
			}
		case "count":
			k, pat, _ := strings.Cut(val, " ")
			c, err1 := strconv.Atoi(k)
			re, err2 := compileDocRE(pat)
			if err1 != nil || err2 != nil {
				bad("%d count %q: want K RE", n, val)
				continue
			}
			sp.counts = append(sp.counts, docCount{c, re})
		case "range":
			f := strings.Fields(val)
			if len(f) != 3 {
				bad("%d range %q: want KEY LO HI", n, val)
				continue
			}
			lo, err1 := strconv.ParseFloat(f[1], 64)
			hi, err2 := strconv.ParseFloat(f[2], 64)
			if err1 != nil || err2 != nil {
				bad("%d range %q: want KEY LO HI", n, val)
				continue
			}
			sp.ranges = append(sp.ranges, docRange{f[0], lo, hi})
		case "exit":
			for _, f := range strings.Fields(val) {
				c, err := strconv.Atoi(f)
				if err != nil {
					bad("%d exit %q", n, val)
				}
				sp.exit = append(sp.exit, c)
			}
		case "timeout":
			d, err := time.ParseDuration(val)
			if err != nil {
				bad("%d timeout %q", n, val)
			}
			sp.timeout = d
		default:
			bad("unknown directive %q", l)
		}
	}
	return mk
}

func parseSkip(val string) *docSkip {
	kind, reason, _ := strings.Cut(val, " ")
	if !slices.Contains(docSkipKinds, kind) || strings.TrimSpace(reason) == "" {
		return nil
	}
	return &docSkip{kind, strings.TrimSpace(reason)}
}

// headRev is the checkout's commit, 12 hex digits, for ${HEAD}, and
// revisionRE what a binary built with -buildvcs=true from it says of its
// commit, for ${REVISION}: "(revision <commit>" from a clone, and
// "(revision unknown: no commit recorded" from a git worktree, whose .git
// is a file and where Go finds no repository. TestDocs sets both before it
// parses the markers.
var (
	headRev    = "HEAD-unknown"
	revisionRE = `\(revision HEAD-unknown`
)

func compileDocRE(s string) (*regexp.Regexp, error) {
	s = strings.ReplaceAll(strings.TrimSpace(s), "${HEAD}", regexp.QuoteMeta(headRev))
	return regexp.Compile(strings.ReplaceAll(s, "${REVISION}", revisionRE))
}

// spec returns the directives of command n (1-based) of b, or the zero
// spec.
func (b *docBlock) spec(n int) *docSpec {
	if b.mark != nil {
		if sp := b.mark.per[n]; sp != nil {
			return sp
		}
	}
	return &docSpec{}
}

// check returns what is wrong with b's marker: none, directives that do
// not parse, or directives for commands it does not have.
func (b *docBlock) check() []string {
	if b.mark == nil {
		return []string{"no docrun marker: say how it runs, or why it does not (skip: gpu|docker|cluster|...)"}
	}
	probs := slices.Clone(b.mark.problems)
	for n := range b.mark.per {
		if n < 1 || n > len(b.cmds) {
			probs = append(probs, fmt.Sprintf("directives for command %d of %d", n, len(b.cmds)))
		}
	}
	for _, need := range b.mark.needs {
		if need != "jaeger" && need != "prometheus3" {
			probs = append(probs, fmt.Sprintf("needs %q: want jaeger or prometheus3", need))
		}
	}
	if b.mark.file == "" && b.mark.skip == nil && len(b.cmds) == 0 {
		probs = append(probs, "no command to run")
	}
	return probs
}

// TestDocParse checks the parser on a document with each kind of block:
// continuations, comments, background jobs, kill lines, transcripts,
// files, markers and inline commands.
func TestDocParse(t *testing.T) {
	summarize(t)
	dir := t.TempDir()
	doc := "Run `go run ./example/app -duration 15s` first.\n" +
		"<!-- docrun inline gpu: otelenergy-agent -devices 0 -->\n" +
		"On a GPU: `otelenergy-agent -devices 0`.\n\n" +
		"<!-- docrun\n1 bg\n1 ready-cmd: curl -s http://x/ => ok\n2 expect: (?i)^energy: \\d+\n-->\n" +
		"```sh\n" +
		"go run ./example/app -load=false &   # a backend # with a hash\n" +
		"# a comment line\n" +
		"curl -s 'http://127.0.0.1:8088/#frag' \\\n  -d '{\"a\":\"# not a comment\"}'\n" +
		"kill %1 %2    # both\n" +
		"```\n\n" +
		"<!-- docrun\nfile: p.yaml\n-->\n```yaml\nkey: v\n```\n\n" +
		"```\n$ curl -s http://x/ \\\n    -d 1\nHTTP/1.1 200 OK\n```\n\n" +
		"```sh\nunmarked\n```\n"
	if err := os.WriteFile(filepath.Join(dir, "README.md"), []byte(doc), 0o644); err != nil {
		fatal(t, err)
	}
	d, err := parseDoc(dir, "README.md")
	if err != nil {
		fatal(t, err)
	}
	if len(d.blocks) != 4 {
		fatalf(t, "%d blocks, want 4: %+v", len(d.blocks), d.blocks)
	}
	sh := d.blocks[0]
	if len(sh.cmds) != 3 || !sh.cmds[0].bg || sh.cmds[0].code != "go run ./example/app -load=false" ||
		!strings.Contains(sh.cmds[1].code, "# not a comment") || !strings.Contains(sh.cmds[1].code, "/#frag") ||
		!slices.Equal(sh.cmds[2].kill, []int{1, 2}) || len(sh.check()) != 0 {
		fatalf(t, "sh block: %+v, problems %v", sh.cmds, sh.check())
	}
	if sp := sh.spec(1); !sp.bg || sp.ready == nil || sp.ready.shell != "curl -s http://x/" || sh.spec(2).expect[0].String() != `(?i)^energy: \d+` {
		fatalf(t, "directives: %+v %+v", sh.spec(1), sh.spec(2))
	}
	if f := d.blocks[1]; f.kind != "file" || f.mark.file != "p.yaml" || f.body != "key: v\n" {
		fatalf(t, "file block: %+v", f)
	}
	if tr := d.blocks[2]; tr.kind != "transcript" || len(tr.cmds) != 1 || normalize(tr.cmds[0].code) != "curl -s http://x/ -d 1" || tr.mark != nil {
		fatalf(t, "transcript: %+v", tr)
	}
	if len(d.blocks[3].check()) != 1 {
		fatalf(t, "an unmarked block passes: %v", d.blocks[3].check())
	}
	if len(d.inline) != 2 || d.inline[0].text != "go run ./example/app -duration 15s" || len(d.declare) != 1 || d.declare[0].kind != "gpu" {
		fatalf(t, "inline %+v, declared %+v", d.inline, d.declare)
	}
	if mk := parseMarker(1, []string{"skip: teleport no", "3 colour: red"}); len(mk.problems) != 2 {
		fatalf(t, "bad directives pass: %v", mk.problems)
	}
}
