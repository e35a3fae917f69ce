package integration

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/openai/openai-go/v3/option"

	"github.com/otelenergy/otelenergy/otelenergy"
	"github.com/otelenergy/otelenergy/otelenergy/openaiproxy"
)

// TestNonStreamingThroughOpenAIClient makes the same non-streaming call
// with openai-go to the demo app and through the gateway, which by
// default asks the app for a stream and rebuilds the body: the raw bodies
// are the same JSON but for id and created, the client's parsed
// completion the same, and the span's tokens the usage's; with upstream
// streaming off the same holds.
func TestNonStreamingThroughOpenAIClient(t *testing.T) {
	app := startApp(t)
	direct, dhc := client(app)
	defer dhc.CloseIdleConnections()
	for _, on := range []bool{true, false} {
		t.Run(map[bool]string{true: "upstream-stream", false: "as-sent"}[on], func(t *testing.T) {
			gw, sr := gateway(t, app, openaiproxy.WithUpstreamStreaming(on))
			viaGW, ghc := client(gw)
			defer ghc.CloseIdleConnections()
			var wantRaw, gotRaw []byte
			if _, err := direct.Chat.Completions.New(context.Background(), params(), option.WithResponseBodyInto(&wantRaw)); err != nil {
				t.Fatal(err)
			}
			if _, err := viaGW.Chat.Completions.New(context.Background(), params(), option.WithResponseBodyInto(&gotRaw)); err != nil {
				t.Fatal(err)
			}
			if !sameButIDs(t, gotRaw, wantRaw) {
				t.Fatalf("through the gateway (%d bytes)\n%q\ndirect (%d bytes)\n%q", len(gotRaw), gotRaw, len(wantRaw), wantRaw)
			}
			var usage struct {
				Usage struct {
					Prompt     int64 `json:"prompt_tokens"`
					Completion int64 `json:"completion_tokens"`
				} `json:"usage"`
			}
			json.Unmarshal(gotRaw, &usage)
			attrs := lastSpan(t, sr, 1)
			if attrs["gen_ai.usage.output_tokens"].AsInt64() != usage.Usage.Completion || attrs["gen_ai.usage.input_tokens"].AsInt64() != usage.Usage.Prompt {
				t.Fatalf("span tokens %v/%v, usage %+v", attrs["gen_ai.usage.output_tokens"].AsInt64(), attrs["gen_ai.usage.input_tokens"].AsInt64(), usage.Usage)
			}
			if _, ok := attrs[otelenergy.EnergyMillijoulesKey]; !ok {
				t.Fatalf("no energy on the span: %v", attrs)
			}
		})
	}
}

// sameButIDs compares two JSON bodies as values once their top-level id
// and created are removed.
func sameButIDs(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y map[string]any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		t.Fatalf("not JSON objects: %s, %s", a, b)
	}
	for _, m := range []map[string]any{x, y} {
		delete(m, "id")
		delete(m, "created")
	}
	return reflect.DeepEqual(x, y)
}
