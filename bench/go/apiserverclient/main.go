// The client of bench/admission_floor.py: sends AdmissionReviews as kube-apiserver's
// webhook client does, with Go's net/http. As there (kubernetes/kubernetes):
//   - HTTP/1.1 only: staging/src/k8s.io/apiserver/pkg/util/webhook/client.go, HookClient,
//     sets cfg.NextProtos = []string{"http/1.1"} (issue 75791), and cfg.QPS = -1 (no
//     client-side rate limit);
//   - kept-alive connections, up to 25 idle per host: staging/src/k8s.io/client-go/
//     transport/cache.go, tlsTransportCache.get, MaxIdleConnsPerHost: idleConnsPerHost (25),
//     TLSHandshakeTimeout 10 s, a dialer with a 30 s timeout and 30 s TCP keep-alive;
//   - POST to the webhook's path with ?timeout=10s (the default timeoutSeconds),
//     Content-Type and Accept application/json.
//
// -concurrency goroutines (20) send back to back (closed loop) for -seconds, from -start
// (Unix seconds) on; with -rate, the goroutines together send that many requests per
// second instead, each on its own even schedule (a call that is late goes at once, and is
// counted in "late": then the server, not the schedule, set the pace). Calls sent in the
// first -warmup seconds are not counted: the API server keeps its connections open for
// minutes, so its calls do not pay a TLS handshake. Each review is one of the -templates (a JSON list of {"path", "body"})
// with its placeholders filled in: every call has its own request uid, every pod its own
// name and uid, and with -unique its own spec (a label value), so no answer can be
// remembered. Prints one JSON object: requests, errors, dials, p50_ms, p99_ms, seconds.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type template struct {
	Path string `json:"path"`
	Body string `json:"body"`
}

type result struct {
	Requests int     `json:"requests"`
	Errors   int     `json:"errors"`
	Dials    int64   `json:"dials"`
	P50ms    float64 `json:"p50_ms"`
	P99ms    float64 `json:"p99_ms"`
	Seconds  float64 `json:"seconds"`
	Late     int     `json:"late"`
	First    string  `json:"first_error,omitempty"`
}

var (
	requestUID = []byte("@req-uid@")
	podName    = []byte("@pod-name@")
	podUID     = []byte("@pod-uid@")
	specLabel  = []byte("@spec@")
)

func uuid() []byte {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		log.Fatal(err)
	}
	b[6], b[8] = (b[6]&0x0f)|0x40, (b[8]&0x3f)|0x80
	h := hex.EncodeToString(b[:])
	return []byte(h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:])
}

// body is review number count of goroutine worker, as bench/admission.py's Reviews makes it.
func body(t template, nonce string, worker, count int, unique bool) []byte {
	name := []byte(fmt.Sprintf("trainer-%s-%d-%07d", nonce, worker, count/2))
	out := bytes.ReplaceAll([]byte(t.Body), requestUID, uuid())
	out = bytes.ReplaceAll(out, podName, name)
	out = bytes.ReplaceAll(out, podUID, append(append([]byte{}, name...), "-uid"...))
	spec := []byte("shared")
	if unique { // /validate sees the mutated object: it never shares a spec with /mutate
		spec = []byte(strings.ReplaceAll(string(name)+t.Path, "/", "."))
	}
	return bytes.ReplaceAll(out, specLabel, spec)
}

func main() {
	base := flag.String("url", "https://localhost:8443", "the webhook's address")
	caFile := flag.String("ca", "ca.crt", "CA bundle of the webhook configuration")
	templates := flag.String("templates", "templates.json", "reviews with placeholders")
	concurrency := flag.Int("concurrency", 20, "requests in flight")
	seconds := flag.Float64("seconds", 4, "how long to send")
	start := flag.Float64("start", 0, "when to begin, in Unix seconds (default: now)")
	unique := flag.Bool("unique", false, "every pod its own spec")
	rate := flag.Float64("rate", 0, "requests per second in all (default 0: back to back)")
	warmup := flag.Float64("warmup", 0, "seconds of calls first, not counted (connections open)")
	flag.Parse()

	pem, err := os.ReadFile(*caFile)
	if err != nil {
		log.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	var work []template
	data, err := os.ReadFile(*templates)
	if err != nil {
		log.Fatal(err)
	}
	if err := json.Unmarshal(data, &work); err != nil {
		log.Fatal(err)
	}
	var dials atomic.Int64
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	transport := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: roots, NextProtos: []string{"http/1.1"}},
		TLSHandshakeTimeout: 10 * time.Second,
		MaxIdleConnsPerHost: 25,
		IdleConnTimeout:     90 * time.Second,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return dialer.DialContext(ctx, network, addr)
		},
	}
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	nonce := hex.EncodeToString(uuid()[:3])

	if *start > 0 {
		time.Sleep(time.Until(time.UnixMilli(int64(*start * 1000))))
	}
	began := time.Now()
	measured := began.Add(time.Duration(*warmup * float64(time.Second)))
	end := measured.Add(time.Duration(*seconds * float64(time.Second)))
	var mu sync.Mutex
	var latencies []time.Duration
	var errors, late int
	var first string
	var wg sync.WaitGroup
	for worker := 0; worker < *concurrency; worker++ {
		wg.Add(1)
		go func(worker int) {
			defer wg.Done()
			var own []time.Duration
			failed, behind := 0, 0
			firstErr := ""
			var interval, offset time.Duration
			if *rate > 0 {
				interval = time.Duration(float64(*concurrency) / *rate * float64(time.Second))
				offset = interval * time.Duration(worker) / time.Duration(*concurrency)
			}
			for count := 0; time.Now().Before(end); count++ {
				if interval > 0 {
					due := began.Add(offset + interval*time.Duration(count))
					if !due.Before(end) {
						break
					}
					if wait := time.Until(due); wait > 0 {
						time.Sleep(wait)
					} else if -wait > interval && !due.Before(measured) {
						behind++
					}
				}
				t := work[count%len(work)]
				req, _ := http.NewRequest("POST", *base+t.Path+"?timeout=10s", bytes.NewReader(body(t, nonce, worker, count, *unique)))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json")
				sent := time.Now()
				resp, err := client.Do(req)
				if err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("%s: HTTP %d", t.Path, resp.StatusCode)
					}
				}
				if err != nil {
					failed++
					if firstErr == "" {
						firstErr = err.Error()
					}
					continue
				}
				if !sent.Before(measured) {
					own = append(own, time.Since(sent))
				}
			}
			mu.Lock()
			latencies = append(latencies, own...)
			errors += failed
			late += behind
			if first == "" {
				first = firstErr
			}
			mu.Unlock()
		}(worker)
	}
	wg.Wait()
	took := time.Since(measured).Seconds()
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	out := result{Requests: len(latencies), Errors: errors, Dials: dials.Load(), Seconds: took, First: first, Late: late}
	if n := len(latencies); n > 0 {
		out.P50ms = float64(latencies[n/2]) / 1e6
		out.P99ms = float64(latencies[max(0, n*99/100-1)]) / 1e6
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		log.Fatal(err)
	}
}
