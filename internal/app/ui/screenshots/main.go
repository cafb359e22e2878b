// Command screenshots starts a real `wasmjobs run` (bin/wasmjobs, with testdata's echo,
// dead_letter and retry modules), enqueues jobs through its API, and saves PNGs of the
// dashboard's overview (also at a phone's width), a job page and the modules page into
// a directory: `make
// screenshots` writes docs/screenshots.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
)

func main() {
	bin := flag.String("bin", "bin/wasmjobs", "the wasmjobs binary")
	out := flag.String("out", "docs/screenshots", "where the PNGs go")
	chromium := flag.String("chromium", "/usr/bin/chromium", "the browser")
	flag.Parse()
	if err := shoot(*bin, *out, *chromium); err != nil {
		log.Fatal(err)
	}
}

func shoot(bin, out, chromium string) error {
	tmp, err := os.MkdirTemp("", "wasmjobs-shots-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	modules := filepath.Join(tmp, "modules")
	os.Mkdir(modules, 0o755)
	for name, src := range map[string]string{"greet": "echo", "thumbnails": "echo", "billing": "dead_letter", "webhooks": "retry"} {
		b, err := os.ReadFile(filepath.Join("testdata/abi", src+".wasm"))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(modules, name+".wasm"), b, 0o644); err != nil {
			return err
		}
	}
	cmd := exec.Command(bin, "run", "--modules", modules, "--data-dir", filepath.Join(tmp, "data"), "--listen", "127.0.0.1:0",
		"--cache-dir", filepath.Join(tmp, "cache"))
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		return err
	}
	defer cmd.Process.Kill()
	urls := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`api=(http://\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
	}()
	var base string
	select {
	case base = <-urls:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s run did not start", bin)
	}
	enqueue := func(body string) string {
		resp, err := http.Post(base+"/v1/jobs", "application/json", strings.NewReader(body))
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		var r struct{ ID string }
		json.NewDecoder(resp.Body).Decode(&r)
		return r.ID
	}
	var show string
	for i := range 40 {
		id := enqueue(fmt.Sprintf(`{"queue":"greet","payload":"Hello, Ada (%d)!"}`, i))
		if i == 7 {
			show = id
		}
		enqueue(fmt.Sprintf(`{"queue":"thumbnails","payload":"img-%d.png","delay":"%dm"}`, i, i%5+1))
		if i%4 == 0 {
			enqueue(fmt.Sprintf(`{"queue":"billing","payload":"{\"invoice\":%d}"}`, 1000+i))
			enqueue(fmt.Sprintf(`{"queue":"webhooks","payload":"https://example.com/hook/%d"}`, i))
		}
		time.Sleep(150 * time.Millisecond) // spread over the rate chart's buckets
	}
	// A new version of greet (the same code with a custom section), and a broken file
	// for billing, which keeps serving its previous version: the modules page shows
	// both in the history.
	echo, err := os.ReadFile("testdata/abi/echo.wasm")
	if err != nil {
		return err
	}
	swap := filepath.Join(tmp, "greet.wasm")
	os.WriteFile(swap, append(echo, 0x00, 0x05, 0x03, 't', 'a', 'g', '2'), 0o644)
	if err := os.Rename(swap, filepath.Join(modules, "greet.wasm")); err != nil {
		return err
	}
	time.Sleep(time.Second)
	broken := filepath.Join(tmp, "billing.wasm")
	os.WriteFile(broken, []byte("not a module"), 0o644)
	if err := os.Rename(broken, filepath.Join(modules, "billing.wasm")); err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	ui := strings.Replace(base, "127.0.0.1", "localhost", 1) + "/ui/"
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.WindowSize(1280, 800))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 60*time.Second)
	defer cancelT()
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, p := range []struct {
		name, path, wait string
		phone            bool
	}{
		{"overview", "", `tr[data-queue]`, false},
		{"job", "jobs/" + show, `#output`, false},
		{"modules", "modules", `#modules`, false},
		{"overview-phone", "", `tr[data-queue]`, true},
	} {
		view := chromedp.EmulateViewport(1280, 800)
		if p.phone {
			view = chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile, chromedp.EmulateScale(2))
		}
		if err := chromedp.Do(ctx, view, chromedp.Navigate(ui+p.path), chromedp.WaitVisible(p.wait)); err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		if err := os.WriteFile(filepath.Join(out, p.name+".png"), png, 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", filepath.Join(out, p.name+".png"))
	}
	return nil
}
