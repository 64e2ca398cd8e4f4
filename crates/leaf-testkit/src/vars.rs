//! The names of the variables that point the tests at their servers, defined once: the
//! provisioning reads them, and `xtask` (which includes this file by its path, so that it stays
//! a binary of few dependencies) sets and reports them.

/// A running MySQL-compatible server (`mysql://user:password@host:3306`).
pub const MYSQL_URL: &str = "LEAFTEST_MYSQL_URL";
/// The image of the MySQL-compatible test containers (default: the official `mariadb:11`).
pub const MYSQL_IMAGE: &str = "LEAFTEST_MYSQL_IMAGE";
/// A running PostgreSQL server (`postgres://user:password@host:5432`).
pub const POSTGRES_URL: &str = "LEAFTEST_POSTGRES_URL";
/// The image of the PostgreSQL test containers (default: the official `postgres:16`).
pub const POSTGRES_IMAGE: &str = "LEAFTEST_POSTGRES_IMAGE";
/// A running ZooKeeper server (`host:port`).
pub const ZK_URL: &str = "LEAFTEST_ZK_URL";
/// The image of the ZooKeeper test containers (default: the official `zookeeper:3.8`).
pub const ZK_IMAGE: &str = "LEAFTEST_ZK_IMAGE";
/// A running Redis server (`redis://host:6379`).
pub const REDIS_URL: &str = "LEAFTEST_REDIS_URL";
/// The image of the Redis test containers (default: the official `redis:7`).
pub const REDIS_IMAGE: &str = "LEAFTEST_REDIS_IMAGE";
/// A running etcd server (`http://host:2379`).
pub const ETCD_URL: &str = "LEAFTEST_ETCD_URL";
/// The image of the etcd test containers (default: the official etcd image).
pub const ETCD_IMAGE: &str = "LEAFTEST_ETCD_IMAGE";
/// A running `leaf-server` (`http://host:8080`).
pub const SERVER_URL: &str = "LEAFTEST_SERVER_URL";
/// The image of the `leaf-server` test containers (default: `leaf-server:local`).
pub const SERVER_IMAGE: &str = "LEAFTEST_SERVER_IMAGE";
