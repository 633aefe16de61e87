// kstatus-bench computes the kstatus status of every object in a JSON corpus (an array of
// objects), several times over, and reports throughput and peak memory. It is the Go side of
// Strata's core-status benchmark; the corpus is decoded before the clock starts, as on the
// Rust side, so only status computation is timed.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func peakRSSKiB() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			fields := strings.Fields(line)
			if len(fields) >= 2 {
				v, _ := strconv.ParseInt(fields[1], 10, 64)
				return v
			}
		}
	}
	return -1
}

func main() {
	if len(os.Args) != 3 && len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: kstatus-bench CORPUS.json ITERATIONS [decode]")
		os.Exit(2)
	}
	decode := len(os.Args) == 4 && os.Args[3] == "decode"
	raw, err := os.ReadFile(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	iterations, err := strconv.Atoi(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	total := 0
	var objects []*unstructured.Unstructured
	if !decode {
		var docs []map[string]interface{}
		if err := json.Unmarshal(raw, &docs); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		objects = make([]*unstructured.Unstructured, len(docs))
		for i, d := range docs {
			// Round-trip through the unstructured JSON decoder so integers are int64, as they
			// are for objects read from the API server.
			b, _ := json.Marshal(d)
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(b); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			objects[i] = u
		}
		docs = nil
		runtime.GC()
	}

	counts := map[string]int{}
	engine := "go-kstatus"
	start := time.Now()
	if decode {
		// End to end, as a status command does: decode the file, then compute every status.
		engine = "go-kstatus-decode"
		for it := 0; it < iterations; it++ {
			var items []json.RawMessage
			if err := json.Unmarshal(raw, &items); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			for _, item := range items {
				u := &unstructured.Unstructured{}
				if err := u.UnmarshalJSON(item); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				res, err := status.Compute(u)
				if it == 0 {
					if err != nil {
						counts["Unknown"]++
					} else {
						counts[res.Status.String()]++
					}
				}
			}
			total += len(items)
		}
	}
	for it := 0; !decode && it < iterations; it++ {
		for _, u := range objects {
			res, err := status.Compute(u)
			if it == 0 {
				if err != nil {
					counts["Unknown"]++
				} else {
					counts[res.Status.String()]++
				}
			}
		}
	}
	elapsed := time.Since(start)
	if !decode {
		total = len(objects) * iterations
	}
	n := total / iterations
	fmt.Printf("{\"engine\":\"%s\",\"objects\":%d,\"iterations\":%d,\"seconds\":%.6f,\"objects_per_second\":%.0f,\"peak_rss_kib\":%d,\"statuses\":%s}\n",
		engine, n, iterations, elapsed.Seconds(), float64(total)/elapsed.Seconds(), peakRSSKiB(), mustJSON(counts))
}

func mustJSON(v interface{}) string {
	b, _ := json.Marshal(v)
	return string(b)
}
