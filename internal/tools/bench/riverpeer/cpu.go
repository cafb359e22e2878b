package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// clockTick is the unit of /proc's CPU times: USER_HZ, 100 on every Linux Go runs on.
const clockTick = 100.0

// cpuSample is CPU seconds used so far: by this process, by every process named postgres
// (with what their exited children used: the postmaster reaps the backends and autovacuum
// workers that ended during the run, so their time is counted too), and by the whole
// machine (busy time of all cores, other processes included).
type cpuSample struct {
	self, postgres, machine float64
}

// sampleCPU reads the three figures; one it cannot read stays zero, so a machine without
// /proc gets jobs/s and no CPU split.
func sampleCPU() cpuSample {
	var s cpuSample
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		s.self = tv(ru.Utime) + tv(ru.Stime)
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, path := range stats {
		if t, ok := postgresTicks(path); ok {
			s.postgres += t / clockTick
		}
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := bytes.Cut(b, []byte("\n"))
		f := strings.Fields(string(line)) // cpu user nice system idle iowait irq softirq steal ...
		for i, v := range f[1:] {
			if i == 3 || i == 4 { // idle, iowait
				continue
			}
			if i >= 8 { // guest times are already in user
				break
			}
			n, _ := strconv.ParseFloat(v, 64)
			s.machine += n / clockTick
		}
	}
	return s
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// postgresTicks returns utime+stime+cutime+cstime of the process whose stat file this is,
// if the process is a postgres.
func postgresTicks(path string) (float64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	// pid (comm) state ppid ...: comm may hold spaces, so split after its closing paren.
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open || string(b[open+1:end]) != "postgres" {
		return 0, false
	}
	f := strings.Fields(string(b[end+1:]))
	// After comm: state(0) ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
	// utime(11) stime(12) cutime(13) cstime(14).
	if len(f) < 15 {
		return 0, false
	}
	var sum float64
	for _, v := range f[11:15] {
		n, _ := strconv.ParseFloat(v, 64)
		sum += n
	}
	return sum, true
}
