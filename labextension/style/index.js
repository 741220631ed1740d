import './base.css';
import './commit.css';
