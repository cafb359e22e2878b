// Package fleet carries modules through a RabbitMQ stream to every host on a broker:
// `wasmjobs modules push` publishes a module there, and each host's Follower writes the
// newest version of each pushed module into its modules directory, where the registry
// takes it as it takes a local file. It also carries the hosts' heartbeats, so that
// `wasmjobs modules list --backend` can show which version each host serves.
package fleet

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"
)

// DefaultStream is the stream queue modules are pushed to when none is named.
const DefaultStream = "wasmjobs.modules"

// MaxMessageSize is RabbitMQ's default max_message_size (128 MiB since 3.8, and so on
// Debian's 3.10.8): a push bigger than this would be refused by the broker with a
// channel error, so push refuses it first with a message that says why.
const MaxMessageSize = 128 << 20

// Kinds of message on the stream.
const (
	KindModule    = "module"    // a module's wasm and manifest
	KindRemove    = "remove"    // a tombstone: remove the module fleet-wide
	KindHeartbeat = "heartbeat" // a host's serving versions
	KindMarker    = "marker"    // a reader's own mark: it has read up to here
)

// Sentinel errors.
var (
	// ErrUnsigned is a push without a signature on a host that trusts a key.
	ErrUnsigned = errors.New("unsigned push")
	// ErrBadSignature is a push whose signature the trusted key does not verify.
	ErrBadSignature = errors.New("signature does not verify with the trusted key")
	// ErrTooBig is a push over MaxMessageSize.
	ErrTooBig = errors.New("push is bigger than RabbitMQ's default max_message_size (128 MiB)")
	// ErrBadName is a module name that is not a plain file name.
	ErrBadName = errors.New("bad module name")
)

// namePattern is what a pushed module's name may be: it becomes a file name in every
// host's modules directory, so nothing that could climb out of it or hide in it.
var namePattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// CheckName refuses a module name that is not a plain, visible file name.
func CheckName(name string) error {
	if !namePattern.MatchString(name) || strings.Contains(name, "..") {
		return fmt.Errorf("%w %q: want letters, digits, _ . - (not first), at most 128", ErrBadName, name)
	}
	return nil
}

// Push is one module message: a version of a module, or its removal.
type Push struct {
	Kind     string // KindModule or KindRemove
	Name     string
	Version  string // host.VersionOf(Wasm, Manifest); empty on a removal
	Manifest []byte // NAME.toml; empty for the defaults
	Wasm     []byte
	// PushedAt orders pushes of one name: the newest wins, whatever order re-publishing
	// puts copies in. It is signed, so a replayed old push cannot pass for a new one.
	PushedAt  time.Time
	Signature []byte // ed25519 over signedBytes; empty when unsigned
}

// signedBytes is what a signature covers: every field that decides what a host runs.
func (p *Push) signedBytes() []byte {
	m, w := sha256.Sum256(p.Manifest), sha256.Sum256(p.Wasm)
	return fmt.Appendf(nil, "wasmjobs-push-v1\n%s\n%s\n%s\n%d\n%s\n%s\n", p.Kind, p.Name, p.Version,
		p.PushedAt.UnixNano(), hex.EncodeToString(m[:]), hex.EncodeToString(w[:]))
}

// Sign signs p with key.
func (p *Push) Sign(key ed25519.PrivateKey) { p.Signature = ed25519.Sign(key, p.signedBytes()) }

// Verify checks p's signature with pub: ErrUnsigned or ErrBadSignature.
func (p *Push) Verify(pub ed25519.PublicKey) error {
	if len(p.Signature) == 0 {
		return ErrUnsigned
	}
	if !ed25519.Verify(pub, p.signedBytes(), p.Signature) {
		return ErrBadSignature
	}
	return nil
}

// Key files are one line each: "wasmjobs-ed25519-private " or "wasmjobs-ed25519-public "
// followed by the standard base64 of the 32-byte seed or public key.
const (
	privatePrefix = "wasmjobs-ed25519-private "
	publicPrefix  = "wasmjobs-ed25519-public "
)

// GenerateKey writes a new key pair: the private key to path (mode 0600) and the public
// key to path+".pub". It refuses to overwrite either.
func GenerateKey(path string) error {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return fmt.Errorf("generate key: %w", err)
	}
	if err := writeNew(path, privatePrefix+base64.StdEncoding.EncodeToString(priv.Seed())+"\n", 0o600); err != nil {
		return err
	}
	return writeNew(path+".pub", publicPrefix+base64.StdEncoding.EncodeToString(pub)+"\n", 0o644)
}

func writeNew(path, text string, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("write key: %w", err)
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return fmt.Errorf("write key %s: %w", path, err)
	}
	return f.Close()
}

func readKey(path, prefix string, size int) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read key: %w", err)
	}
	line, _, _ := bufio.NewReader(bytes.NewReader(data)).ReadLine()
	text, ok := strings.CutPrefix(strings.TrimSpace(string(line)), prefix)
	if !ok {
		return nil, fmt.Errorf("key %s: want a line starting %q (made by wasmjobs modules keygen)", path, prefix)
	}
	raw, err := base64.StdEncoding.DecodeString(text)
	if err != nil || len(raw) != size {
		return nil, fmt.Errorf("key %s: want the base64 of %d bytes after %q", path, size, prefix)
	}
	return raw, nil
}

// ReadPrivateKey reads a private key file written by GenerateKey.
func ReadPrivateKey(path string) (ed25519.PrivateKey, error) {
	seed, err := readKey(path, privatePrefix, ed25519.SeedSize)
	if err != nil {
		return nil, err
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// ReadPublicKey reads a public key file written by GenerateKey.
func ReadPublicKey(path string) (ed25519.PublicKey, error) {
	raw, err := readKey(path, publicPrefix, ed25519.PublicKeySize)
	if err != nil {
		return nil, err
	}
	return ed25519.PublicKey(raw), nil
}
