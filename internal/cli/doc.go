// Package cli gives otelenergy's binaries the same command-line
// conventions, as Prometheus's promslog/flag does for its own: the logging
// flags -log-level and -log-format with the slog logger they select, and
// -version with the build information that each binary also logs at
// start. It uses the standard library only.
//
// # Adopting it
//
// A binary that parses with a flag.FlagSet adds the three flags in two
// lines and builds its logger from them:
//
//	var logging cli.Logging
//	logging.AddFlags(fs)             // -log-level, -log-format
//	version := cli.AddVersionFlag(fs) // -version
//	// after fs.Parse:
//	if *version {
//		fmt.Fprintln(stdout, cli.ReadBuild())
//		return 0
//	}
//	log := logging.NewLogger(stderr)
//	log.Info("otelenergy-agent starting", slog.Any("build", cli.ReadBuild()))
//
// A binary that declares its flags in a table of its own (as
// otelenergy-proxy's flags package does, with an environment variable per
// flag) takes the names, defaults, usages and checks from here instead:
// [LevelFlag], [DefaultLevel], [LevelUsage], [CheckLevel], and the same
// for the format and the version, so that both binaries accept and
// document the same values.
//
// # Guarantees
//
//   - The accepted levels are debug, info, warn and error; the formats
//     text and json. Any other value fails with an error matching
//     [ErrInvalid] that names the accepted values.
//   - [ReadBuild] never fails: without build information (a test binary,
//     or a binary built without module support) its fields say "unknown".
package cli
