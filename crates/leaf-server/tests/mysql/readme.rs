//! The README's "Running on MySQL", followed as written.

use super::*;

// ---- The README's "Running on MySQL", followed as written ----------------------------------

/// The fenced blocks of `lang` in the README's section headed `heading`, in order.
fn readme_blocks(heading: &str, lang: &str) -> Vec<String> {
    let readme = include_str!("../../../../README.md");
    let start = readme.find(heading).expect("the section");
    let end = readme[start + 1..]
        .find("\n## ")
        .map_or(readme.len(), |e| start + 1 + e);
    readme[start..end]
        .split(&format!("```{lang}\n"))
        .skip(1)
        .map(|b| b.split("```").next().unwrap().to_owned())
        .collect()
}

/// The statements of a shown SQL block as they run on the test's server: the docs' database
/// `leaf` is the test's own (which exists already), their user `leaf` is `user`.
fn statements(block: &str, db: &MysqlDatabase, user: &User) -> Vec<String> {
    let sql: String = block
        .lines()
        .filter(|l| !l.trim_start().starts_with("--"))
        .map(|l| format!("{l}\n"))
        .collect();
    sql.split(';')
        .map(str::trim)
        .filter(|s| !s.is_empty() && *s != "CREATE DATABASE leaf")
        .map(|s| {
            s.replace("'leaf'@'%'", &format!("'{}'@'%'", user.name))
                .replace("ON leaf.", &format!("ON `{}`.", db.name))
                .replace("'change-me'", &format!("'{}'", user.password))
        })
        .collect()
}

/// The shown `leaf.toml` as node `n` of the test uses it: the test's database and user, the
/// loopback address as its ip, its own cache directory.
fn shown_leaf_toml(db: &MysqlDatabase, user: &User) -> String {
    let tomls = readme_blocks("## Running on MySQL", "toml");
    let shown = "mysql://leaf:change-me@db.internal:3306/leaf";
    assert!(tomls[0].contains(shown), "{}", tomls[0]);
    tomls[0]
        .replace(shown, &user.url(db))
        .replace("ip = \"10.0.0.5\"", "ip = \"127.0.0.1\"")
        .replace("cache_dir = \"/var/lib/leaf\"", "cache_dir = \"state\"")
}

/// Node `n` in its own working directory holding the shown `leaf.toml`, serving.
fn readme_node(base: &Path, n: u32, port: u16, toml: &str) -> Server {
    let dir = base.join(format!("node{n}"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("leaf.toml"), toml).unwrap();
    Server::start(&dir, port, n, &[])
}

fn readme_user(role: &str) -> User {
    let suffix = format!("{:010x}", fastrand::u64(..) >> 24);
    User {
        name: format!("ltreadme{role}{suffix}"),
        password: format!("pw{:016x}{suffix}", fastrand::u64(..)),
    }
}

/// An empty database, the README's first grant (the server creates the tables), its
/// `leaf.toml` on two nodes, its `INSERT`: IDs from both nodes, distinct segments and worker
/// ids; then the "Backup and restore" commands (`store raise`, a dry run first), after which
/// the next ID is past the margin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_mysql_section_runs_from_an_empty_database_to_two_nodes() {
    let (db, root) = database().await;
    let sql = readme_blocks("## Running on MySQL", "sql");
    // The fourth is the secured recipe's user (`REQUIRE X509`), which leaf-registry-mysql's
    // tests/secured.rs runs on a TLS-only server.
    assert_eq!(
        sql.len(),
        4,
        "a grant with CREATE, the DBA's DDL, the INSERT, the secured recipe's user"
    );
    assert!(sql[3].contains("REQUIRE X509"), "{}", sql[3]);
    let user = readme_user("a");
    for s in statements(&sql[0], &db, &user) {
        exec(&root, s).await;
    }
    let toml = shown_leaf_toml(&db, &user);
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().to_path_buf();
    let ports = [free_port(), free_port()];

    let first = {
        let (base, toml) = (base.clone(), toml.clone());
        tokio::task::spawn_blocking(move || readme_node(&base, 1, ports[0], &toml))
            .await
            .unwrap()
    };
    // The server created both tables; the user inserts the README's tag.
    let as_user = MySqlPool::connect(&user.url(&db)).await.unwrap();
    for s in statements(&sql[2], &db, &user) {
        exec(&as_user, s).await;
    }
    let (ids, snowflakes, base) = tokio::task::spawn_blocking(move || {
        let one = first.get("/api/segment/get/order").body;
        let sf_one = first.get("/api/snowflake/get/x").body;
        let second = readme_node(&base, 2, ports[1], &toml);
        let two = second.get("/api/segment/get/order").body;
        let sf_two = second.get("/api/snowflake/get/x").body;
        for s in [first, second] {
            let (status, log) = s.sigterm();
            assert!(status.success(), "{log}");
        }
        (
            [one, two],
            [sf_one, sf_two].map(|s| s.parse::<i64>().unwrap()),
            base,
        )
    })
    .await
    .unwrap();
    assert_eq!(ids, ["1", "2001"], "the README's answers");
    let layout = SnowflakeLayout::default();
    let workers = snowflakes.map(|id| layout.decode(id).unwrap().worker_id);
    let rows: BTreeMap<String, u64> = sqlx::query("SELECT id, ip_port FROM leaf_workerid_alloc")
        .fetch_all(&root)
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get("ip_port"), u64::from(r.get::<u32, _>("id"))))
        .collect();
    for (port, worker) in ports.iter().zip(workers) {
        assert_eq!(
            rows.get(&format!("127.0.0.1:{port}")),
            Some(&worker),
            "{rows:?}"
        );
    }
    assert_ne!(workers[0], workers[1]);

    // Backup and restore: the commands shown there, on node 1's configuration, move every tag
    // past the margin: the dry run changes nothing, the raise does.
    let commands = readme_blocks("## Backup and restore", "sh");
    assert_eq!(commands.len(), 1);
    let commands: Vec<&str> = commands[0]
        .lines()
        .filter(|l| l.starts_with("leaf-server store raise"))
        .collect();
    assert_eq!(commands.len(), 2, "a dry run, then the raise: {commands:?}");
    let max_id = || async {
        sqlx::query_scalar::<_, i64>("SELECT max_id FROM leaf_alloc WHERE biz_tag = 'order'")
            .fetch_one(&as_user)
            .await
            .unwrap()
    };
    for (command, expect_max_id, expect_line) in [
        (
            commands[0],
            4001,
            "dry run: 2 rows would be raised, 0 left alone",
        ),
        (commands[1], 10_004_001, "raised 2 rows, left 0 alone"),
    ] {
        let config = base.join("node1/leaf.toml");
        let args: Vec<String> = command
            .split_whitespace()
            .skip(1)
            .map(|a| a.replace("/etc/leaf/leaf.toml", &config.display().to_string()))
            .collect();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_leaf-server"))
            .args(&args)
            .current_dir(base.join("node1"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{command}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            text.contains("order  plain  max_id 4001 -> 10004001"),
            "{text}"
        );
        assert!(text.contains(expect_line), "{text}");
        assert_eq!(max_id().await, expect_max_id, "after {command}");
    }
    let next = tokio::task::spawn_blocking(move || {
        let toml = std::fs::read_to_string(base.join("node1/leaf.toml")).unwrap();
        let again = readme_node(&base, 1, ports[0], &toml);
        let next = again.get("/api/segment/get/order").body;
        assert!(again.sigterm().0.success());
        next
    })
    .await
    .unwrap();
    assert_eq!(
        next, "10004001",
        "4001, the end of what was handed out, plus 10,000,000"
    );
    user.drop_on(&root).await;
}

/// The README's second block: the DBA runs the DDL and grants no CREATE; the server starts on
/// the tables as they are, and the user indeed cannot create one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_mysql_tables_made_by_a_dba_serve_without_create() {
    let (db, root) = database().await;
    let sql = readme_blocks("## Running on MySQL", "sql");
    let user = readme_user("b");
    for s in statements(&sql[1], &db, &user) {
        exec(&root, s).await;
    }
    let as_user = MySqlPool::connect(&user.url(&db)).await.unwrap();
    let refused = as_user
        .execute("CREATE TABLE not_allowed (a INT)")
        .await
        .expect_err("the README's user has no CREATE");
    assert!(refused.to_string().contains("denied"), "{refused}");
    let toml = shown_leaf_toml(&db, &user);
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().to_path_buf();
    let port = free_port();
    let node = tokio::task::spawn_blocking(move || readme_node(&base, 1, port, &toml))
        .await
        .unwrap();
    for s in statements(&sql[2], &db, &user) {
        exec(&as_user, s).await;
    }
    crate::common::sql::serves_the_readmes_order_tag_then_stops(node).await;
    as_user.close().await;
    user.drop_on(&root).await;
}
