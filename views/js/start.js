// Start: the linked views and the figure fitting follow every change Gradio makes to the page, and the window's
// size; then the page as first drawn is hooked and fitted.
/* global lens, hook, deckHook, fitAll, linkHook */
new MutationObserver(() => { lens(); hook(); deckHook(); fitAll(); }).observe(document.body, {childList: true, subtree: true});
window.addEventListener('resize', window.__elFit);
hook();
fitAll();
linkHook();
