package auth

import (
	"crypto"
	"crypto/hmac"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"slices"
	"strings"
	"time"
)

// JWT authenticates JSON Web Tokens signed with HS256 (a shared secret) or
// RS256 (RSA keys from a JWKS document). Tokens carry the claims sub (the
// caller's name), namespaces (a list, or ["*"]), roles and exp (required),
// and nbf, iss and aud (checked when present or configured).
type JWT struct {
	secret []byte
	keys   map[string]*rsa.PublicKey // by kid; "" when the JWKS has one key without a kid
	// Leeway tolerates clock skew on exp and nbf.
	Leeway time.Duration
	// Issuer, when set, is the only iss accepted: a token without it or
	// with another is refused. Set it when the identity provider signs
	// tokens for other services too.
	Issuer string
	// Audience, when set, must be among the token's aud (a string or a
	// list, RFC 7519 section 4.1.3): a token meant for another service of
	// the same identity provider is refused.
	Audience string
}

// NewHS256 returns a JWT authenticator for tokens signed with secret.
func NewHS256(secret []byte) (*JWT, error) {
	if len(secret) < 32 {
		return nil, fmt.Errorf("jwt secret: %d bytes, at least 32 required", len(secret))
	}
	return &JWT{secret: secret, Leeway: 30 * time.Second}, nil
}

// NewRS256FromJWKS returns a JWT authenticator for tokens signed by any RSA
// key in the JWKS file at path.
func NewRS256FromJWKS(path string) (*JWT, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	var doc struct {
		Keys []struct {
			Kty, Kid, N, E, Alg, Use string
		} `json:"keys"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("jwks %s: %w", path, err)
	}
	j := &JWT{keys: map[string]*rsa.PublicKey{}, Leeway: 30 * time.Second}
	for i, k := range doc.Keys {
		if k.Kty != "RSA" {
			continue
		}
		n, err1 := base64.RawURLEncoding.DecodeString(k.N)
		e, err2 := base64.RawURLEncoding.DecodeString(k.E)
		if err1 != nil || err2 != nil || len(e) == 0 || len(e) > 4 {
			return nil, fmt.Errorf("jwks %s: keys[%d]: n and e must be base64url", path, i)
		}
		exp := 0
		for _, b := range e {
			exp = exp<<8 | int(b)
		}
		pub := &rsa.PublicKey{N: new(big.Int).SetBytes(n), E: exp}
		if pub.N.BitLen() < 2048 {
			return nil, fmt.Errorf("jwks %s: keys[%d] (%s): %d-bit RSA key, at least 2048 required", path, i, k.Kid, pub.N.BitLen())
		}
		j.keys[k.Kid] = pub
	}
	if len(j.keys) == 0 {
		return nil, fmt.Errorf("jwks %s: no RSA keys", path)
	}
	return j, nil
}

type jwtHeader struct {
	Alg string `json:"alg"`
	Kid string `json:"kid"`
}

type jwtClaims struct {
	Sub        string   `json:"sub"`
	Namespaces []string `json:"namespaces"`
	Roles      []string `json:"roles"`
	Exp        *int64   `json:"exp"`
	Nbf        *int64   `json:"nbf"`
	Iss        *string  `json:"iss"`
	Aud        audience `json:"aud"`
}

// audience is the aud claim: one string or a list of them (RFC 7519).
type audience []string

func (a *audience) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*a = audience{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("aud: want a string or a list of strings, got %s", clip(b))
	}
	*a = many
	return nil
}

// clip shortens raw claim text quoted in an error.
func clip(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "…"
	}
	return string(b)
}

// Authenticate implements Authenticator.
func (j *JWT) Authenticate(token string, now time.Time) (Identity, error) {
	fail := func(format string, args ...any) (Identity, error) {
		return Identity{}, fmt.Errorf("jwt: "+format+": %w", append(args, ErrUnauthenticated)...)
	}
	if token == "" {
		return fail("no bearer token")
	}
	if err := checkSize(token); err != nil {
		return Identity{}, fmt.Errorf("jwt: %w", err)
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return fail("not three dot-separated parts")
	}
	var h jwtHeader
	if err := decodeSegment(parts[0], &h); err != nil {
		return fail("header: %v", err)
	}
	signed := []byte(parts[0] + "." + parts[1])
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return fail("signature: %v", err)
	}
	switch h.Alg {
	case "HS256":
		if j.secret == nil {
			return fail("alg HS256 is not accepted by this server")
		}
		mac := hmac.New(sha256.New, j.secret)
		mac.Write(signed)
		if !hmac.Equal(mac.Sum(nil), sig) {
			return fail("bad signature")
		}
	case "RS256":
		if j.keys == nil {
			return fail("alg RS256 is not accepted by this server")
		}
		key := j.keys[h.Kid]
		if key == nil {
			return fail("unknown key id %q", h.Kid)
		}
		sum := sha256.Sum256(signed)
		if rsa.VerifyPKCS1v15(key, crypto.SHA256, sum[:], sig) != nil {
			return fail("bad signature")
		}
	default:
		return fail("alg %q: want HS256 or RS256", h.Alg)
	}
	var c jwtClaims
	if err := decodeSegment(parts[1], &c); err != nil {
		return fail("claims: %v", err)
	}
	if c.Sub == "" {
		return fail("claim sub: missing")
	}
	if c.Exp == nil {
		return fail("claim exp: missing")
	}
	exp := time.Unix(*c.Exp, 0)
	if now.After(exp.Add(j.Leeway)) {
		return fail("token of %q expired at %s", c.Sub, exp.UTC().Format(time.RFC3339))
	}
	if c.Nbf != nil && now.Add(j.Leeway).Before(time.Unix(*c.Nbf, 0)) {
		return fail("token of %q not valid before %s", c.Sub, time.Unix(*c.Nbf, 0).UTC().Format(time.RFC3339))
	}
	if j.Issuer != "" {
		switch {
		case c.Iss == nil:
			return fail("token of %q: claim iss: missing, want %q", c.Sub, j.Issuer)
		case *c.Iss != j.Issuer:
			return fail("token of %q: claim iss %q: want %q", c.Sub, *c.Iss, j.Issuer)
		}
	}
	if j.Audience != "" && !slices.Contains(c.Aud, j.Audience) {
		if c.Aud == nil {
			return fail("token of %q: claim aud: missing, want %q", c.Sub, j.Audience)
		}
		return fail("token of %q: claim aud %q: does not contain %q", c.Sub, []string(c.Aud), j.Audience)
	}
	id := Identity{Name: c.Sub, Expires: exp}
	for _, r := range c.Roles {
		role, err := ParseRole(r)
		if err != nil {
			return fail("claim roles: %v", err)
		}
		id.Roles = append(id.Roles, role)
	}
	if len(id.Roles) == 0 {
		return fail("claim roles: missing")
	}
	for _, ns := range c.Namespaces {
		if ns == "*" {
			id.AllNamespaces = true
			continue
		}
		id.Namespaces = append(id.Namespaces, ns)
	}
	return id, nil
}

func decodeSegment(seg string, v any) error {
	raw, err := base64.RawURLEncoding.DecodeString(seg)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, v)
}
