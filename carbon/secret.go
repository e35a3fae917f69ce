package carbon

import (
	"fmt"
	"os"
	"strings"
)

// Secret is a provider's token or password. It can be built only from an
// environment variable or a file, and it prints as "[redacted]": its
// value sits behind a function, so that even printing a struct that holds
// it (fmt's %+v and %#v reach unexported fields) shows an address, not
// the value. The zero Secret is empty.
type Secret struct {
	get func() string
}

// SecretFromEnv reads the secret from the environment variable name. It
// returns an error wrapping [ErrInvalidConfig], naming the variable and
// never the value, when it is unset or blank.
func SecretFromEnv(name string) (Secret, error) {
	v := strings.TrimSpace(os.Getenv(name))
	if v == "" {
		return Secret{}, fmt.Errorf("%w: environment variable %s is unset or empty", ErrInvalidConfig, name)
	}
	return Secret{get: func() string { return v }}, nil
}

// SecretFromFile reads the secret from the file at path (a mounted
// Kubernetes secret, say), without surrounding white space. It returns an
// error wrapping [ErrInvalidConfig] when the file cannot be read or is
// blank; the error names the path, never the content.
func SecretFromFile(path string) (Secret, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		// The path error carries no content.
		return Secret{}, fmt.Errorf("%w: secret file: %w", ErrInvalidConfig, err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return Secret{}, fmt.Errorf("%w: secret file %s is empty", ErrInvalidConfig, path)
	}
	return Secret{get: func() string { return v }}, nil
}

// IsZero reports whether s is empty.
func (s Secret) IsZero() bool { return s.get == nil }

func (s Secret) value() string {
	if s.get == nil {
		return ""
	}
	return s.get()
}

// String returns "[redacted]".
func (s Secret) String() string { return "[redacted]" }

// GoString returns "[redacted]".
func (s Secret) GoString() string { return "[redacted]" }

// MarshalText returns "[redacted]", so that a config dumped as JSON or
// YAML does not carry the secret.
func (s Secret) MarshalText() ([]byte, error) { return []byte("[redacted]"), nil }
