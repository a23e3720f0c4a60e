// In-app navigation: real paths, changed with the History API (no page load).
import type { ComponentChildren } from "preact";
import { useEffect, useState } from "preact/hooks";

export function navigate(path: string): void {
  history.pushState(null, "", path);
  dispatchEvent(new PopStateEvent("popstate"));
}

export function usePath(): string {
  const [path, setPath] = useState(location.pathname);
  useEffect(() => {
    const changed = () => setPath(location.pathname);
    addEventListener("popstate", changed);
    return () => removeEventListener("popstate", changed);
  }, []);
  return path;
}

/** An in-app link: no page load. */
export function Link(props: { href: string; children: ComponentChildren; current?: boolean }) {
  return (
    <a
      href={props.href}
      aria-current={props.current ? "page" : undefined}
      onClick={(e) => {
        if (e.metaKey || e.ctrlKey || e.shiftKey || e.button !== 0) return;
        e.preventDefault();
        navigate(props.href);
      }}
    >
      {props.children}
    </a>
  );
}

