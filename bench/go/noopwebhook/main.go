// The floor for bench/admission_floor.py: an admission webhook that does nothing, in Go's
// standard library only, as a Go webhook is usually written (net/http, encoding/json). It
// decodes each AdmissionReview for its request uid and allows it. TLS as the real server
// has it (webhook/serving/tls.py): TLS 1.2 at least, forward-secret AEAD suites for 1.2,
// HTTP/1.1 only, and kept-alive connections idle up to 120 s (webhook/serving/server.py).
//
//	noopwebhook -addr 127.0.0.1:PORT -cert tls.crt -key tls.key
package main

import (
	"crypto/tls"
	"encoding/json"
	"flag"
	"log"
	"net/http"
	"time"
)

type review struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Request    *struct {
		UID string `json:"uid"`
	} `json:"request,omitempty"`
	Response *answer `json:"response,omitempty"`
}

type answer struct {
	UID     string `json:"uid"`
	Allowed bool   `json:"allowed"`
}

func allow(w http.ResponseWriter, r *http.Request) {
	var in review
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	out := review{APIVersion: in.APIVersion, Kind: in.Kind, Response: &answer{UID: in.Request.UID, Allowed: true}}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(out); err != nil {
		log.Printf("answer: %v", err)
	}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8443", "address to serve on")
	cert := flag.String("cert", "tls.crt", "serving certificate")
	key := flag.String("key", "tls.key", "its key")
	flag.Parse()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /mutate", allow)
	mux.HandleFunc("POST /validate", allow)
	server := &http.Server{
		Addr:              *addr,
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		TLSConfig: &tls.Config{
			MinVersion: tls.VersionTLS12,
			CipherSuites: []uint16{ // ECDHE+AESGCM:ECDHE+CHACHA20
				tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
				tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
				tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256, tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
			},
			NextProtos: []string{"http/1.1"},
		},
		// A non-nil, empty map: no HTTP/2, as the real server speaks HTTP/1.1 only.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	log.Fatal(server.ListenAndServeTLS(*cert, *key))
}
