//! nginx (Debian's package; CI installs it) in front of `choicewise serve` processes, as
//! docs/gateway.md shows it: buffering off, HTTP/1.1 kept alive to the gateways. Shared by the
//! tests that put a load balancer in front of several gateways.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use choicewise_test_support::within;

/// An nginx master process, stopped with SIGTERM (so that it stops its workers) when dropped.
pub struct Nginx(std::process::Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let _ = self.0.wait();
    }
}

/// nginx on 127.0.0.1:`port`, its files in `dir`, in front of the gateways at `servers`
/// (`HOST:PORT` each), `location` lines added to its proxy's; once it accepts. Panics, saying
/// the test did not run, where nginx is not installed.
pub async fn start(dir: &Path, port: u16, servers: &[String], location: &str) -> Nginx {
    let nginx = ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("nginx is not installed (apt-get install nginx-light); this test DID NOT RUN");
    let servers: String = servers.iter().map(|s| format!("server {s}; ")).collect();
    let conf = format!(
        "worker_processes 1;\npid {dir}/nginx.pid;\nerror_log {dir}/error.log;\n\
         events {{ worker_connections 1024; }}\n\
         http {{\n  access_log off;\n\
           client_body_temp_path {dir}/body;\n  proxy_temp_path {dir}/proxy;\n\
           fastcgi_temp_path {dir}/fastcgi;\n  uwsgi_temp_path {dir}/uwsgi;\n  scgi_temp_path {dir}/scgi;\n\
           upstream choicewise {{ {servers}}}\n\
           server {{\n    listen 127.0.0.1:{port};\n    location / {{\n\
               proxy_pass http://choicewise;\n      proxy_http_version 1.1;\n\
               proxy_set_header Connection \"\";\n      proxy_buffering off;\n\
               {location}\n\
               proxy_read_timeout 1h;\n    }}\n  }}\n}}\n",
        dir = dir.display(),
    );
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let child = std::process::Command::new(nginx)
        .args([
            "-p",
            dir.to_str().unwrap(),
            "-e",
            "error.log",
            "-c",
            "nginx.conf",
        ])
        .args(["-g", "daemon off;"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let front = format!("http://127.0.0.1:{port}");
    within(Duration::from_secs(20), "nginx accepting", async {
        while reqwest::get(format!("{front}/healthz")).await.is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    Nginx(child)
}
