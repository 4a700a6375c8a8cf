//go:build linux

package nftables

import (
	"errors"
	"strings"
	"testing"
)

// CheckVersions accepts upstream's minimums and later, and refuses what is
// older with a *VersionError naming the requirement; both refusals come
// back when both fail (bullseye: 5.10 and nft 0.9.8).
func TestCheckVersions(t *testing.T) {
	for _, tc := range []struct {
		kernel, nft string
		skip        bool
		want        []string // Components refused, in order
	}{
		{"6.12.57+deb13-cloud-amd64\n", "nftables v1.1.3 (Commodore Bullmoose #4)\n", false, nil},
		{"6.1.0-56-cloud-amd64", "nftables v1.0.6 (Lester Gooch #5)", false, nil},
		{"5.13", "nftables v1.0.1 (Fearless Fosdick #3)", false, nil},
		{"5.13.0", "nftables v1.0.1", false, nil},
		{"6.18.0", "nftables v1.0.10 (Fearless Fosdick #3)", false, nil},
		{"5.10.0-32-cloud-amd64\n", "nftables v0.9.8 (E.D.S.)\n", false, []string{"kernel", "nft"}},
		{"5.10.0-32-cloud-amd64", "nftables v1.0.6 (Lester Gooch #5)", false, []string{"kernel"}},
		{"5.12.19", "nftables v1.0.2", false, []string{"kernel"}},
		{"5.10.0-32-cloud-amd64", "nftables v1.0.6 (Lester Gooch #5)", true, nil},
		{"", "nftables v1.0.0 (Fearless Fosdick)", true, []string{"nft"}},
		{"6.1.0", "nftables v0.9.9 (Prudence Pimpleton)", false, []string{"nft"}},
	} {
		err := CheckVersions(tc.kernel, tc.nft, tc.skip)
		var got []string
		if err != nil {
			var joined interface{ Unwrap() []error }
			if !errors.As(err, &joined) {
				t.Errorf("CheckVersions(%q, %q): %v is not a joined error", tc.kernel, tc.nft, err)
				continue
			}
			for _, e := range joined.Unwrap() {
				var ve *VersionError
				if !errors.As(e, &ve) {
					t.Errorf("CheckVersions(%q, %q): %v is not a *VersionError", tc.kernel, tc.nft, e)
					continue
				}
				got = append(got, ve.Component)
			}
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("CheckVersions(%q, %q, %v) refused %v, want %v (%v)", tc.kernel, tc.nft, tc.skip, got, tc.want, err)
		}
	}
}

// The message says what is needed, what the host has, and how to skip the
// kernel check.
func TestVersionErrorMessage(t *testing.T) {
	err := CheckVersions("5.10.0-32-cloud-amd64", "nftables v0.9.8 (E.D.S.)", false)
	for _, want := range []string{
		"the nftables mode needs kernel 5.13 or later, this host has 5.10.0-32-cloud-amd64",
		SkipKernelVersionCheckEnv + "=1",
		"the nftables mode needs nft 1.0.1 or later, this host has 0.9.8",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	var ve *VersionError
	if !errors.As(err, &ve) || ve.Component != "kernel" || ve.Have != "5.10.0-32-cloud-amd64" || ve.Need != MinKernelVersion {
		t.Errorf("errors.As: %+v", ve)
	}
}

// Output that is not a version is an error, not a pass.
func TestCheckVersionsUnreadable(t *testing.T) {
	for _, tc := range []struct{ kernel, nft string }{
		{"", "nftables v1.0.6"},
		{"linux", "nftables v1.0.6"},
		{"6.1.0", ""},
		{"6.1.0", "nft: command not found"},
		{"6.1.0", "nftables vX"},
	} {
		err := CheckVersions(tc.kernel, tc.nft, false)
		var ve *VersionError
		if err == nil || errors.As(err, &ve) {
			t.Errorf("CheckVersions(%q, %q) = %v, want a plain error", tc.kernel, tc.nft, err)
		}
	}
}

func TestVersionLess(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"5.10", "5.13", true}, {"5.13", "5.13.0", false}, {"5.13.0", "5.13", false},
		{"5.9", "5.13", true}, {"6.1", "5.13", false}, {"1.0.0", "1.0.1", true}, {"1.0.10", "1.0.9", false},
	} {
		if got := versionLess(mustParseVersion(tc.a), mustParseVersion(tc.b)); got != tc.want {
			t.Errorf("versionLess(%s, %s) = %v", tc.a, tc.b, got)
		}
	}
}
