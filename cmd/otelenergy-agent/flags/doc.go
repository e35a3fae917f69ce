// Package flags is otelenergy-agent's command line: every flag, its
// environment equivalent, its default and its check, declared once. It
// depends on the standard library, internal/cli and internal/carbonconf
// (the carbon flags, shared with the proxy) only, so that tests elsewhere
// (the deployment manifests') parse a container's arguments exactly as the
// agent does.
//
// # Contract
//
//   - Every flag -x-y has the variable OTELENERGY_X_Y; a flag on the command
//     line wins over its variable.
//   - An invalid value, in a flag or a variable, is an error wrapping
//     [ErrInvalid] whose one-line message names the flag (and the variable).
//   - The carbon flags (-carbon-intensity, -pue, ...) are
//     internal/carbonconf's, checked together after parsing; their errors
//     also match carbon.ErrInvalidConfig.
//   - -h writes [Usage], every flag with its default and variable, and
//     returns [ErrHelp].
package flags
