//! The command line: `leaf-server [--config PATH] [--check-config] [--help] [--version]`,
//! `leaf-server probe [--ready] [--url URL] [--config PATH]`, the health check of a container,
//! and `leaf-server store raise --by N [--period-by M] [--dry-run] [--config PATH]`, the step
//! after a restore of the segment store from an older copy.

use std::ffi::OsString;
use std::path::PathBuf;

/// What `--version` prints: `leaf-server 0.2.0 (git 0123456789ab; backends: sqlite, local)`,
/// the git revision the binary was built from (`unknown` outside a checkout) and the cargo
/// features of the backends it has.
pub fn version_text() -> String {
    format!(
        "leaf-server {} (git {}; backends: {})",
        env!("CARGO_PKG_VERSION"),
        env!("LEAF_SERVER_GIT_REVISION"),
        crate::compose::backends::built_in().join(", ")
    )
}

/// What the command line asks for.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Args {
    /// `--config PATH`: the configuration file (default: `leaf.toml` in the working directory,
    /// if it exists).
    pub config: Option<PathBuf>,
    /// `--check-config`: load and validate the configuration, then exit.
    pub check_config: bool,
    /// `--help`.
    pub help: bool,
    /// `--version`.
    pub version: bool,
    /// `probe`: ask the running server's `/healthz` (or `/readyz`) instead of serving.
    pub probe: Option<Probe>,
    /// `store raise`: raise every counter of the configured segment store instead of serving.
    pub raise: Option<Raise>,
}

/// `leaf-server store raise --by N [--period-by M] [--dry-run]`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Raise {
    /// `--by N`: what every plain tag's `max_id` is raised by.
    pub by: i64,
    /// `--period-by M`: what a business tag's period rows are raised by (default: `--by`).
    pub period_by: Option<i64>,
    /// `--dry-run`: print the plan, change nothing.
    pub dry_run: bool,
}

/// `leaf-server probe [--ready] [--url URL]`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Probe {
    /// `--ready`: ask `/readyz` (every mode serving), not `/healthz` (the process alive).
    pub ready: bool,
    /// `--url URL`: the server's base URL; default: `server.listen` of the configuration, an
    /// unspecified address (`0.0.0.0`) asked on loopback.
    pub url: Option<String>,
}

/// The `--help` text.
pub const USAGE: &str = "\
usage: leaf-server [--config PATH] [--check-config]
       leaf-server probe [--ready] [--url URL] [--config PATH]
       leaf-server store raise --by N [--period-by M] [--dry-run] [--config PATH]

Serves unique IDs over HTTP and gRPC (one port): Leaf's segment and snowflake modes.

options:
  --config PATH    read this TOML file (default: leaf.toml in the working directory, if any)
  --check-config   load and validate the configuration, then exit
  --help           print this text
  --version        print the version, the git revision and the backends built in

probe: asks the running server's /healthz (with --ready, /readyz) and exits 0 when it answers
200, 1 otherwise; for container health checks, with no shell tools needed. The server is
--url URL (http://host:port), else server.listen of the configuration.

store raise: after the segment store was restored from an older copy, and before any node
serves from it again, moves every counter past the IDs handed out since the copy was taken:
every plain tag's max_id up by N, a business tag's period rows up by M (default N) within
their format's width; claims and definitions are left alone. Nothing is changed when one row
cannot be raised (it is named). --dry-run prints the plan only. N must exceed the IDs any tag
handed out since the copy (the README's Backup and restore section).

Every key can also be set with a LEAF_ variable, `__` separating sections:
  LEAF_SERVER__LISTEN=127.0.0.1:9090  LEAF_SNOWFLAKE__ENABLED=false
";

impl Args {
    /// Parses the arguments (without the program name).
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Args, String> {
        let mut out = Args::default();
        let mut args = args.into_iter().peekable();
        if args.peek().is_some_and(|a| a == "probe") {
            args.next();
            out.probe = Some(Probe::default());
        } else if args.peek().is_some_and(|a| a == "store") {
            args.next();
            match args.next() {
                Some(a) if a == "raise" => out.raise = Some(Raise::default()),
                Some(a) => {
                    return Err(format!(
                        "unknown store command {:?} (leaf-server store raise --by N)",
                        a.to_string_lossy()
                    ));
                }
                None => return Err("store needs a command: store raise --by N".into()),
            }
        }
        let mut by = None;
        while let Some(arg) = args.next() {
            let text = arg.to_string_lossy();
            if let Some(probe) = &mut out.probe {
                match text.as_ref() {
                    "--ready" => {
                        probe.ready = true;
                        continue;
                    }
                    "--url" => {
                        let url = args.next().ok_or("--url needs a URL")?;
                        probe.url = Some(url.to_string_lossy().into_owned());
                        continue;
                    }
                    "--check-config" => return Err("probe takes no --check-config".into()),
                    _ => {}
                }
            }
            if let Some(raise) = &mut out.raise {
                let mut amount = |name: &str| -> Result<i64, String> {
                    let value = args.next().ok_or(format!("{name} needs a number"))?;
                    let value = value.to_string_lossy();
                    match value.parse::<i64>() {
                        Ok(n) if n >= 1 => Ok(n),
                        _ => Err(format!(
                            "{name} must be a whole number of at least 1, got {value:?}"
                        )),
                    }
                };
                match text.as_ref() {
                    "--by" => {
                        by = Some(amount("--by")?);
                        continue;
                    }
                    "--period-by" => {
                        raise.period_by = Some(amount("--period-by")?);
                        continue;
                    }
                    "--dry-run" => {
                        raise.dry_run = true;
                        continue;
                    }
                    "--check-config" => return Err("store raise takes no --check-config".into()),
                    _ => {}
                }
            }
            match text.as_ref() {
                "--config" | "-c" => {
                    let path = args.next().ok_or("--config needs a path")?;
                    out.config = Some(PathBuf::from(path));
                }
                "--check-config" => out.check_config = true,
                "--help" | "-h" => out.help = true,
                "--version" | "-V" => out.version = true,
                other => match other.strip_prefix("--config=") {
                    Some(path) if !path.is_empty() => out.config = Some(PathBuf::from(path)),
                    _ => return Err(format!("unknown argument {other:?} (see --help)")),
                },
            }
        }
        if let Some(raise) = &mut out.raise {
            raise.by = by.ok_or("store raise needs --by N (see --help)")?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, String> {
        Args::parse(args.iter().map(OsString::from))
    }

    #[test]
    fn parse_table() {
        assert_eq!(parse(&[]).unwrap(), Args::default());
        assert_eq!(
            parse(&["--config", "a.toml"]).unwrap().config,
            Some("a.toml".into())
        );
        assert_eq!(
            parse(&["--config=b.toml"]).unwrap().config,
            Some("b.toml".into())
        );
        assert!(parse(&["--check-config"]).unwrap().check_config);
        assert!(parse(&["--config"]).is_err());
        assert!(parse(&["--config="]).is_err());
        assert!(parse(&["--port", "1"]).unwrap_err().contains("--port"));
        assert_eq!(
            parse(&["--ready"]).unwrap_err(),
            "unknown argument \"--ready\" (see --help)"
        );
    }

    #[test]
    fn probe_table() {
        assert_eq!(parse(&["probe"]).unwrap().probe, Some(Probe::default()));
        let p = parse(&["probe", "--ready", "--url", "http://h:1"]).unwrap();
        assert_eq!(
            p.probe,
            Some(Probe {
                ready: true,
                url: Some("http://h:1".into())
            })
        );
        let p = parse(&["probe", "--config", "a.toml"]).unwrap();
        assert_eq!(p.config, Some("a.toml".into()));
        assert!(parse(&["probe", "--url"]).is_err());
        assert!(parse(&["probe", "--check-config"]).is_err());
        assert!(parse(&["probe", "--bogus"]).is_err());
        assert!(parse(&["--config", "probe"]).unwrap().probe.is_none());
    }

    #[test]
    fn store_raise_table() {
        let r = parse(&["store", "raise", "--by", "1000", "--config", "a.toml"]).unwrap();
        assert_eq!(
            r.raise,
            Some(Raise {
                by: 1000,
                period_by: None,
                dry_run: false
            })
        );
        assert_eq!(r.config, Some("a.toml".into()));
        let r = parse(&[
            "store",
            "raise",
            "--dry-run",
            "--period-by",
            "5",
            "--by",
            "7",
        ])
        .unwrap();
        assert_eq!(
            r.raise,
            Some(Raise {
                by: 7,
                period_by: Some(5),
                dry_run: true
            })
        );
        let err = |args: &[&str]| parse(args).unwrap_err();
        assert!(err(&["store", "raise"]).contains("needs --by"));
        assert!(err(&["store"]).contains("needs a command"));
        assert!(err(&["store", "lower"]).contains("unknown store command \"lower\""));
        assert!(err(&["store", "raise", "--by"]).contains("--by needs a number"));
        for bad in ["0", "-3", "1e6", "ten", "9223372036854775808"] {
            let e = err(&["store", "raise", "--by", bad]);
            assert!(e.contains("at least 1"), "{bad}: {e}");
        }
        assert!(err(&["store", "raise", "--by", "1", "--period-by", "0"]).contains("--period-by"));
        assert!(err(&["store", "raise", "--by", "1", "--ready"]).contains("--ready"));
        assert!(
            err(&["store", "raise", "--by", "1", "--check-config"]).contains("no --check-config")
        );
        // A probe is not a store command, and the reverse.
        assert!(parse(&["probe", "--by", "1"]).is_err());
        assert!(parse(&["--by", "1"]).is_err());
    }
}
