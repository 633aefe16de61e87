// kstatus-bench computes the kstatus status of every object in a JSON corpus (an array of
// objects), several times over, and reports throughput and peak memory. It is the Go side of
// Strata's core-status benchmark: either the corpus is decoded before the clock starts (only
// status computation is timed) or, with "decode", every pass decodes the file too. The peak
// RSS counter is reset once loading is done, so it reports what the engine holds and uses.
// With "yaml", the corpus is a YAML List (as `kubectl get -o yaml` prints) and every pass
// converts it with sigs.k8s.io/yaml, as kubectl does, before decoding and computing;
// "to-yaml CORPUS.json OUT.yaml" writes such a List from a JSON corpus.
// With STATUS_OUT set, every object's status and message of the first pass is written there,
// one "status<TAB>message" line each, for the bench to compare with Strata's.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"
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
	if len(os.Args) == 4 && os.Args[1] == "to-yaml" {
		toYAML(os.Args[2], os.Args[3])
		return
	}
	if len(os.Args) != 3 && len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: kstatus-bench CORPUS ITERATIONS [decode|yaml] | to-yaml CORPUS.json OUT.yaml")
		os.Exit(2)
	}
	fromYAML := len(os.Args) == 4 && os.Args[3] == "yaml"
	decode := len(os.Args) == 4 && (os.Args[3] == "decode" || fromYAML)
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
		// Each object through the unstructured JSON decoder (integers as int64, as for
		// objects read from the API server), once; then the file's bytes are released.
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		objects = make([]*unstructured.Unstructured, len(items))
		for i, item := range items {
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(item); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			objects[i] = u
		}
		items = nil
		raw = nil
		runtime.GC()
		debug.FreeOSMemory()
	}
	// From here on the peak is the engine's (Linux: clear_refs 5 resets VmHWM).
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)

	var perObject *bufio.Writer
	if path := os.Getenv("STATUS_OUT"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer f.Close()
		perObject = bufio.NewWriter(f)
	}
	record := func(it int, res *status.Result, err error) {
		if it != 0 || perObject == nil {
			return
		}
		clean := strings.NewReplacer("\n", " ", "\t", " ")
		if err != nil {
			fmt.Fprintf(perObject, "Unknown\t%s\n", clean.Replace(err.Error()))
		} else {
			fmt.Fprintf(perObject, "%s\t%s\n", res.Status.String(), clean.Replace(res.Message))
		}
	}

	counts := map[string]int{}
	engine := "go-kstatus"
	start := time.Now()
	if decode {
		// End to end, as a status command does: decode the file, then compute every status.
		engine = "go-kstatus-decode"
		if fromYAML {
			engine = "go-kstatus-yaml"
		}
		for it := 0; it < iterations; it++ {
			var items []json.RawMessage
			if fromYAML {
				converted, err := yaml.YAMLToJSON(raw)
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				var list struct {
					Items []json.RawMessage `json:"items"`
				}
				if err := json.Unmarshal(converted, &list); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
				items = list.Items
			} else if err := json.Unmarshal(raw, &items); err != nil {
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
				record(it, res, err)
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
			record(it, res, err)
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
	if perObject != nil {
		perObject.Flush()
	}
	if !decode {
		total = len(objects) * iterations
	}
	n := total / iterations
	fmt.Printf("{\"engine\":\"%s\",\"objects\":%d,\"iterations\":%d,\"seconds\":%.6f,\"objects_per_second\":%.0f,\"peak_rss_kib\":%d,\"statuses\":%s}\n",
		engine, n, iterations, elapsed.Seconds(), float64(total)/elapsed.Seconds(), peakRSSKiB(), mustJSON(counts))
}

// toYAML writes the JSON corpus (an array of objects) as one YAML List, in the style
// `kubectl get -o yaml` prints (sigs.k8s.io/yaml).
func toYAML(in, out string) {
	raw, err := os.ReadFile(in)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var items []interface{}
	if err := json.Unmarshal(raw, &items); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	list := map[string]interface{}{"apiVersion": "v1", "kind": "List", "metadata": map[string]interface{}{"resourceVersion": ""}, "items": items}
	text, err := yaml.Marshal(list)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := os.WriteFile(out, text, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func mustJSON(v interface{}) string {
	b, _ := json.Marshal(v)
	return string(b)
}
