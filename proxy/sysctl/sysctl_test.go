package sysctl

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestProc(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "net/ipv4/conf/all"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "net/ipv4/conf/all/route_localnet"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := proc{root: root}
	if v, err := s.Get("net/ipv4/conf/all/route_localnet"); err != nil || v != 0 {
		t.Fatalf("Get = %d, %v", v, err)
	}
	if err := s.Set("net/ipv4/conf/all/route_localnet", 1); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Get("net/ipv4/conf/all/route_localnet"); err != nil || v != 1 {
		t.Fatalf("Get after Set = %d, %v", v, err)
	}
	if _, err := s.Get("net/ipv4/nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Get of a missing name = %v, want fs.ErrNotExist", err)
	}
	if err := os.WriteFile(filepath.Join(root, "bad"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("bad"); err == nil {
		t.Fatal("Get of a non-integer succeeded")
	}
}
