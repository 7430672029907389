//! Showing a completion: `--json`, the plain labelled lines, or the live view on a terminal,
//! with the combinator asked for.

use choicewise::Completions;
use tokio::sync::watch;

use crate::view::{ViewArgs, picked_verdict};
use crate::{Exit, live, plain};

/// Whether the live view will be used.
pub fn live(view: &ViewArgs) -> bool {
    !view.json && !view.plain && live::available()
}

/// Shows the completion as chosen, until it ends.
pub async fn show(
    completions: Completions,
    view: &ViewArgs,
    options: live::Options,
) -> Result<(), Exit> {
    let pick = view.pick();
    let (publish, decision) = watch::channel(None);
    let selection = pick.clone().map(|p| {
        let completions = completions.clone();
        tokio::spawn(async move {
            let selection = p.run(completions).await;
            publish.send_replace(Some(selection.clone()));
            selection
        })
    });
    let decision = selection.is_some().then_some(decision);
    let shown = if view.json {
        let picked = match (&pick, selection) {
            (Some(p), Some(task)) => Some((p.clone(), task)),
            _ => None,
        };
        return plain::json(completions, picked).await.map_err(Exit::from);
    } else if live(view) {
        live::run(completions.clone(), options, decision).await
    } else {
        plain::labelled(completions.clone(), decision)
            .await
            .map_err(Exit::from)
    };
    match (pick, selection) {
        (Some(pick), Some(task)) => {
            let selection = task.await.unwrap_or_default();
            println!("{}", pick.summary(&selection));
            picked_verdict(&selection, shown)
        }
        _ => shown,
    }
}
