// Package carbonconf is the carbon part of otelenergy's binaries: the
// flags that configure emissions (declared once, for both binaries' flag
// tables), their checks, and the one builder that turns their values
// into a [carbon.Model], with its [carbon.Poller] when a provider is
// named. The library never reads flags or secrets; this package does, for
// the binaries.
//
// # Flags
//
// [Flags] returns the entries for a binary's [cli.Table]:
// -carbon-intensity, -carbon-provider, -carbon-zone, -pue,
// -embodied-g-per-hour, -carbon-token-file, -carbon-user,
// -carbon-poll-interval and -carbon-stale-after, each with its
// OTELENERGY_* variable. Carbon is off unless -carbon-intensity or
// -carbon-provider is set. [Config.Check] checks the flags together
// (a provider needs a zone and, but for ukgrid, a token).
//
// # Guarantees
//
//   - Every invalid value, alone or together with others, is a one-line
//     error that matches both [cli.ErrInvalid] and
//     [carbon.ErrInvalidConfig] and names the flag.
//   - The provider's token or password is read only from the
//     environment variable [TokenEnv] or from the file that
//     -carbon-token-file names, into a [carbon.Secret]; no flag takes it,
//     and no error or log line of this package carries it.
//   - [Build] starts nothing: [Carbon.Start] starts the poller's
//     goroutine and [Carbon.Shutdown] stops it. A nil *Carbon is carbon
//     off, and its methods do nothing.
package carbonconf
