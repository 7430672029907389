//! `choicewise-testserver`: serve a recorded SSE stream over HTTP on 127.0.0.1, for manual
//! runs of a client against a misbehaving server.

use std::process::ExitCode;
use std::time::Duration;

use choicewise_testserver::{Failure, TestServer, TestServerBuilder};

const USAGE: &str = "\
usage: choicewise-testserver --fixture FILE [options]

Serves FILE as the SSE body of POST /v1/chat/completions and
POST /openai/deployments/{deployment}/chat/completions?api-version=V on 127.0.0.1.

options:
  --port N              port to bind (default 0: any free port, printed)
  --seed N              seed of the random choices (default 0)
  --writes MIN-MAX      write the body in random pieces of MIN..=MAX bytes
  --delay-ms N          wait up to N ms before each write
  --pings N             a `: ping` comment after an event with probability 1/N
  --close-after N       cut the connection after N body bytes (no [DONE])
  --stall-after N       send N body bytes, then nothing
  --status CODE         answer every request with this status and an OpenAI error body
  --fail-first K        with --status: only the first K requests
  --retry-after VALUE   with --status: send Retry-After: VALUE
  --api-key KEY         require this key (Bearer, or api-key on the Azure path)
  --log                 print each request received
";

fn parse(args: &[String]) -> Result<(TestServerBuilder, bool), String> {
    let mut builder = TestServer::builder();
    let mut fixture = None;
    let mut status = None;
    let mut fail_first = None;
    let mut retry_after = None;
    let mut log = false;
    let mut it = args.iter();
    let number = |flag: &str, v: Option<&String>| -> Result<u64, String> {
        let v = v.ok_or_else(|| format!("{flag} needs a value"))?;
        v.parse()
            .map_err(|_| format!("{flag}: not a number: {v:?}"))
    };
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--fixture" => fixture = Some(it.next().ok_or("--fixture needs a file")?.clone()),
            "--port" => {
                let port = number(arg, it.next())?;
                builder = builder.port(u16::try_from(port).map_err(|_| "--port: too large")?);
            }
            "--seed" => builder = builder.seed(number(arg, it.next())?),
            "--writes" => {
                let v = it.next().ok_or("--writes needs MIN-MAX")?;
                let (lo, hi) = v.split_once('-').ok_or("--writes needs MIN-MAX")?;
                let lo = lo.parse().map_err(|_| "--writes: bad MIN")?;
                let hi = hi.parse().map_err(|_| "--writes: bad MAX")?;
                builder = builder.random_writes(lo, hi);
            }
            "--delay-ms" => {
                builder = builder.max_write_delay(Duration::from_millis(number(arg, it.next())?))
            }
            "--pings" => builder = builder.pings(number(arg, it.next())?),
            "--close-after" => builder = builder.close_after(number(arg, it.next())? as usize),
            "--stall-after" => builder = builder.stall_after(number(arg, it.next())? as usize),
            "--status" => {
                let code = number(arg, it.next())?;
                status = Some(u16::try_from(code).map_err(|_| "--status: too large")?);
            }
            "--fail-first" => fail_first = Some(number(arg, it.next())? as usize),
            "--retry-after" => {
                retry_after = Some(it.next().ok_or("--retry-after needs a value")?.clone())
            }
            "--api-key" => builder = builder.api_key(it.next().ok_or("--api-key needs a key")?),
            "--log" => log = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let fixture = fixture.ok_or("--fixture FILE is required")?;
    let body = std::fs::read(&fixture).map_err(|e| format!("reading {fixture}: {e}"))?;
    builder = builder.body(body);
    if let Some(status) = status {
        let mut failure = Failure::status(status);
        if let Some(after) = retry_after {
            failure = failure.retry_after(after);
        }
        builder = match fail_first {
            Some(k) => builder.fail_first(k, failure),
            None => builder.fail(failure),
        };
    } else if fail_first.is_some() || retry_after.is_some() {
        return Err("--fail-first and --retry-after need --status".into());
    }
    Ok((builder, log))
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (builder, log) = match parse(&args) {
        Ok(parsed) => parsed,
        Err(message) if message.is_empty() => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("choicewise-testserver: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let server = match builder.start().await {
        Ok(server) => server,
        Err(e) => {
            eprintln!("choicewise-testserver: cannot listen: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("listening on {}", server.base_url());
    println!("azure: {}", server.azure_base_url("DEPLOYMENT"));
    let mut seen = 0;
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if log {
            let requests = server.requests();
            for r in &requests[seen..] {
                let query = r
                    .query
                    .as_deref()
                    .map(|q| format!("?{q}"))
                    .unwrap_or_default();
                println!(
                    "{} {}{query} ({} body bytes)",
                    r.method,
                    r.path,
                    r.body.len()
                );
            }
            seen = requests.len();
        }
    }
}
