/* The search page's excerpts when the site is opened from disk (file://).
 *
 * Sphinx's search shows an excerpt of each page it finds by fetching that page; a browser refuses fetch() on
 * file:// URLs, so opened from disk the results had titles and no excerpts. The docs build writes every page's
 * text into _static/jaxmagic_page_text.js (docs/_ext/jaxmagic_docs.py); on a file:// page this answers
 * Sphinx's fetch of a page from that text, loaded on first use. Served over http(s) nothing changes.
 */
(() => {
  if (window.location.protocol !== "file:") return;
  const root = new URL(document.documentElement.dataset.content_root || "./", window.location.href);
  let pages = null;
  const load = () =>
    pages ||
    (pages = new Promise((resolve) => {
      const script = document.createElement("script");
      script.src = new URL("_static/jaxmagic_page_text.js", root).href;
      script.onload = () => resolve(window.JAXMAGIC_PAGE_TEXT || {});
      script.onerror = () => resolve({});
      document.head.appendChild(script);
    }));
  const fetchPage = window.fetch.bind(window);
  window.fetch = (input, init) => {
    const url = new URL(typeof input === "string" ? input : input.url, window.location.href);
    if (url.protocol !== "file:" || !url.pathname.startsWith(root.pathname)) return fetchPage(input, init);
    const name = decodeURIComponent(url.pathname.slice(root.pathname.length)).replace(/\.html$/, "");
    return load().then((text) => {
      if (!(name in text)) return fetchPage(input, init);
      const main = document.createElement("div");
      main.setAttribute("role", "main");
      main.textContent = text[name];
      return new Response(main.outerHTML, { headers: { "Content-Type": "text/html" } });
    });
  };
})();
