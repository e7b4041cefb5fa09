//! A minimal Pingora pass-through proxy, built from the same Pingora as sturnus: every request
//! goes to one fixed upstream over pooled keep-alive connections, with no routing and no body
//! handling. The benchmark uses it as the framework's own ceiling on the machine.
//!
//! ```text
//! cargo run --release --example passthrough -- --listen 127.0.0.1:9103 --upstream 127.0.0.1:9101
//! ```

use async_trait::async_trait;
use clap::Parser;
use pingora::server::configuration::{Opt, ServerConf};
use pingora::server::Server;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_core::Result;
use pingora_proxy::{ProxyHttp, Session};
use std::net::SocketAddr;

/// A minimal Pingora reverse proxy to one upstream.
#[derive(Parser, Debug)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9103")]
    listen: SocketAddr,
    /// The upstream `host:port` (plain HTTP).
    #[arg(long, default_value = "127.0.0.1:9101")]
    upstream: SocketAddr,
    /// Worker threads of the proxy service.
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

/// Forwards everything to one upstream.
struct Passthrough {
    upstream: SocketAddr,
}

#[async_trait]
impl ProxyHttp for Passthrough {
    type CTX = ();

    fn new_ctx(&self) {}

    async fn upstream_peer(&self, _: &mut Session, _: &mut ()) -> Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(self.upstream, false, String::new())))
    }
}

fn main() {
    let args = Args::parse();
    let conf = ServerConf {
        threads: args.threads,
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(Opt::default(), conf);
    server.bootstrap();
    let mut proxy = pingora_proxy::http_proxy_service_with_name(
        &server.configuration,
        Passthrough {
            upstream: args.upstream,
        },
        "passthrough",
    );
    proxy.add_tcp(&args.listen.to_string());
    server.add_service(proxy);
    println!(
        "passthrough listening on {} -> {}",
        args.listen, args.upstream
    );
    server.run_forever();
}
