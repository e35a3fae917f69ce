package carbonconf

import (
	"github.com/otelenergy/otelenergy/carbon"
)

// CheckFiles reads the file -carbon-token-file names, so that a missing,
// unreadable or empty secret file is a bad argument, reported in one line
// naming the flag (exit status 2) before anything starts, rather than a
// failed start. [Build] reads the secret again, when it is used; neither
// ever puts it in an error. It returns nil when no file is named.
func (c Config) CheckFiles() error {
	if c.TokenFile == "" {
		return nil
	}
	if _, err := carbon.SecretFromFile(c.TokenFile); err != nil {
		return invalid("invalid value %q for -%s: %v", c.TokenFile, FlagTokenFile, err)
	}
	return nil
}
