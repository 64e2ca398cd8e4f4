//! The command line: `leaf-server [--config PATH] [--check-config] [--help] [--version]`.

use std::ffi::OsString;
use std::path::PathBuf;

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
}

/// The `--help` text.
pub const USAGE: &str = "\
usage: leaf-server [--config PATH] [--check-config]

Serves unique IDs over HTTP: Leaf's segment and snowflake modes.

options:
  --config PATH    read this TOML file (default: leaf.toml in the working directory, if any)
  --check-config   load and validate the configuration, then exit
  --help           print this text
  --version        print the version

Every key can also be set with a LEAF_ variable, `__` separating sections:
  LEAF_SERVER__LISTEN=127.0.0.1:9090  LEAF_SNOWFLAKE__ENABLED=false
";

impl Args {
    /// Parses the arguments (without the program name).
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Args, String> {
        let mut out = Args::default();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let text = arg.to_string_lossy();
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
    }
}
